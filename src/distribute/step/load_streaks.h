#pragma once
// What the task pool makes of its samples of the machine's load (os::procs_running(), taken by the
// caller every 20 ms): whether the machine is busy (the busy-machine extras take part) and how
// many runnable threads not ours count against the cores when deciding whether waiting threads
// may spin. A sample is one instant: a quiet machine shows blips (a kernel thread, our own input
// pipeline's thread between two batches), and a busy one can look quiet for a sample (the other
// process between two runs, ours counted awake while falling asleep). Internal (distribute/step).

namespace lockstep::distribute {

class LoadStreaks {
 public:
  // One sample: the runnable threads on the machine that are not the pool's.
  void add(int others) {
    others_ = others;
    busy_ = others > 0 ? busy_ + 1 : 0;
    quiet_ = others > 0 ? 0 : quiet_ + 1;
  }
  // Busy after two busy samples in a row; once busy (was_busy: the extras are taking part),
  // until ten quiet samples in a row.
  bool busy(bool was_busy) const { return was_busy ? quiet_ < 10 : busy_ >= 2; }
  // The others to count against the cores for spinning: none at the first busy sample after a
  // quiet one. Stopping the spin for a blip costs every wait of the next 20 ms (some fifty steps
  // of a small model) a futex wake-up; a real co-runner stops it one sample later.
  int others_for_spinning() const { return busy_ == 1 ? 0 : others_; }

 private:
  int others_ = 0;
  int busy_ = 0;   // busy samples in a row
  int quiet_ = 0;  // quiet samples in a row
};

}  // namespace lockstep::distribute
