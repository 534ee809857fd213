"""scripts/bench's results as rows (medians over rounds, tuned PyTorch peers) and as Markdown:
the comparison, the PyTorch grid, the co-runner table, the all-reduce table and the targets."""
import statistics

# flop per example of one training step (forward + backward; the first layer's dx is skipped).
FLOP_PER_EXAMPLE = {
    "mlp": 203264 + 205824,
    "wide": 3 * 2 * (784 * 2048 + 2048 * 2048 + 2048 * 10) - 2 * 784 * 2048,
    "conv": 2 * 2 * 26 * 26 * 32 * 9 + 3 * 2 * 13 * 13 * 32 * 10,
}
# The all-reduce floor's bandwidth: a single-core memory copy on this class of machine. Open MPI on
# one host moves the message through shared memory (a copy per byte sent), each rank on its own
# core; two ranks copying at once share the all-core copy bandwidth, about 12-13 GB/s each.
COPY_BANDWIDTH = 13e9
CO_RUNNERS = ("co-runner", "co-runner pinned")
# The wide model's weights (784-2048-2048-10 with biases), and the bytes an optimizer's pass must
# move for each at least: the weight and Adam's two moments, read and written (the gradients are
# left out, as if they never left the cache).
WIDE_WEIGHTS = 784 * 2048 + 2048 + 2048 * 2048 + 2048 + 2048 * 10 + 10
UPDATE_BYTES = 24


def median(values):
    return statistics.median(values) if values else None


def round_ratio(a, b):
    """The median over the rounds both rows ran of a's rate / b's rate in that round, or None.
    The two runs of a round are minutes apart, so a VM's slow and fast hours cancel in each ratio:
    the measure the speed issue's own figures use (medians of per-round ratios)."""
    ra, rb = (a or {}).get("by_round") or {}, (b or {}).get("by_round") or {}
    common = [k for k in ra if k in rb and rb[k]]
    return median([ra[k] / rb[k] for k in common]) if common else None


def check(text, a, b, target):
    """A target on the ratio of row a's rate to row b's: the ratio of their medians, and the
    median of their per-round ratios."""
    return (text, a["samples_per_s"] / b["samples_per_s"], target, round_ratio(a, b))


def rates_by_round(meta, gflops, flop_per_example):
    """A floor measured once a round (GFLOP/s, in round order) as samples/s by round; none when
    a round's measurement is missing (which round a value belongs to is then unknown)."""
    gflops = gflops or []
    if len(gflops) != (meta or {}).get("rounds"):
        return {}
    return {r: g * 1e9 / flop_per_example for r, g in enumerate(gflops)}


def floors(meta):
    """Median floor per precision over rounds, GFLOP/s (None when ops_bench was not run)."""
    return {p: median(v) for p, v in meta.get("floors", {}).items()}


def floor_fraction(row, meta, samples):
    f = floors(meta).get("bfloat16" if row.get("precision") == "mixed_bfloat16" else "float32")
    if row["model"] != "mlp" or not f:
        return None
    return FLOP_PER_EXAMPLE["mlp"] * samples / 1e9 / f


def plain_row(c, rs, meta):
    row = {k: c.get(k) for k in ("id", "name", "system", "model", "condition", "replicas",
                                 "precision", "kind", "group", "tuning", "defaults", "mpi",
                                 "baseline", "mode", "profiler")}
    row["global_batch"] = rs[-1]["global_batch"]
    row["rounds"] = len(rs)
    for k in ("samples_per_s", "epoch_s", "first_epoch_s", "peak_rss_mb"):
        row[k] = median([r[k] for r in rs])
    row["best_samples_per_s"] = max(r["samples_per_s"] for r in rs)
    row["by_round"] = {r["round"]: r["samples_per_s"] for r in rs if "round" in r}
    acc = [r["test_accuracy"] for r in rs if "test_accuracy" in r]
    if acc:
        row["test_accuracy"] = median(acc)
    if all("allreduce_seconds_per_step" in r for r in rs):
        row["allreduce_seconds_per_step"] = median([r["allreduce_seconds_per_step"] for r in rs])
        for k in ("allreduce_bytes_per_step", "workers", "local_replicas"):
            row[k] = rs[-1].get(k)
    row["floor_fraction"] = floor_fraction(row, meta, row["samples_per_s"])
    return row


def tuned_rows(configs, runs, meta):
    """Per (model, peer, condition): each round's best grid point, then the median over rounds."""
    groups = {}
    for c in configs:
        if c.get("group"):
            groups.setdefault((c["model"], c["group"], c["condition"]), []).append(c)
    out = []
    for (model, group, condition), members in groups.items():
        per_round = {}
        for c in members:
            for r in runs[c["id"]]:
                best = per_round.get(r["round"])
                if best is None or r["samples_per_s"] > best[1]["samples_per_s"]:
                    per_round[r["round"]] = (c, r)
        if not per_round:
            continue
        winners = [per_round[k] for k in sorted(per_round)]
        rates = sorted(w[1]["samples_per_s"] for w in winners)
        counts = {}
        for c, _ in winners:
            counts[c["tuning"]] = counts.get(c["tuning"], 0) + 1
        won = sorted(counts.items(), key=lambda kv: -kv[1])
        mid = min(winners, key=lambda w: abs(w[1]["samples_per_s"] - median(rates)))
        row = {"id": "%s: %s tuned [%s]" % (model, group, condition),
               "name": "%s tuned (won: %s)" % (group, "; ".join(
                   "%s in %d/%d rounds" % (t, n, len(winners)) for t, n in won)),
               "system": "PyTorch", "model": model, "condition": condition, "replicas": 1,
               "precision": members[0].get("precision", "float32"), "kind": "torch",
               "tuned": True, "group": group,
               "winner": won[0][0], "global_batch": mid[1]["global_batch"],
               "rounds": len(winners), "samples_per_s": median(rates),
               "best_samples_per_s": rates[-1],
               "by_round": {k: per_round[k][1]["samples_per_s"] for k in per_round},
               "epoch_s": median([w[1]["epoch_s"] for w in winners]),
               "first_epoch_s": median([w[1]["first_epoch_s"] for w in winners]),
               "peak_rss_mb": median([w[1]["peak_rss_mb"] for w in winners])}
        row["floor_fraction"] = floor_fraction(row, meta, row["samples_per_s"])
        out.append(row)
    return out


def rows_of(configs, runs, meta):
    rows = [plain_row(c, runs[c["id"]], meta) for c in configs if runs[c["id"]]]
    rows += tuned_rows(configs, runs, meta)
    quiet = {(r["model"], r["name"]): r for r in rows if r["condition"] == "quiet"}
    quiet_tuned = {(r["model"], r["group"]): r for r in rows
                   if r.get("tuned") and r["condition"] == "quiet"}
    for r in rows:
        if r["condition"] == "quiet":
            continue
        q = quiet_tuned.get((r["model"], r["group"])) if r.get("tuned") else quiet.get(
            (r["model"], r["name"]))
        if q:
            r["of_quiet"] = r["samples_per_s"] / q["samples_per_s"]
            r["of_quiet_by_round"] = round_ratio(r, q)
    return rows


def header(meta):
    out = ["Date: %s  " % meta["date"], "Machine: %s  " % meta["machine"],
           "Commit: %s  " % meta.get("commit", "?"), "Command: `%s`  " % meta["command"],
           "Rounds: %d, epochs per seed-model run: %d (first reported apart); took %.0f min  " % (
               meta["rounds"], meta["epochs"], meta.get("minutes", 0)),
           "Load average before / after: %s / %s  " % (meta["load_before"], meta["load_after"]),
           "PyTorch environment: %s; OMP_NUM_THREADS and OPENBLAS_NUM_THREADS per grid point, "
           "set before torch loads  " % (", ".join("%s=%s" % kv for kv in meta["torch_env"].items())
                                         or "OpenBLAS's own core type")]
    cpu = meta.get("cpu") or {}
    if cpu:
        out.append("CPU: %s; host ISA %s; oneDNN ISA %s; cap %s; Lockstep's loops %s; bfloat16 "
                   "math %s; mixed_bfloat16 in its %s form  " % (
                       cpu.get("model", "?"), cpu.get("host_isa", "?"), cpu.get("onednn_isa", "?"),
                       meta.get("isa_cap") or "none", cpu.get("loops", "?"),
                       cpu.get("bfloat16_math", "?"), cpu.get("mixed_bfloat16_form", "?")))
    if meta.get("openblas_coretypes"):
        out.append("OpenBLAS core types tried (one thread, GFLOP/s): %s  " % "; ".join(
            "%s %s" % (k, "%.1f" % v if isinstance(v, float) else v)
            for k, v in meta["openblas_coretypes"].items()))
    if meta.get("bf16_floor_note"):
        out.append("Floor bfloat16: %s  " % meta["bf16_floor_note"])
    for precision, gflops in floors(meta).items():
        if gflops:
            rate = gflops * 1e9 / FLOP_PER_EXAMPLE["mlp"]
            out.append("Floor %s: oneDNN's own %s matmuls on the seed step's five shapes, one pinned "
                       "copy per core at once: %.0f GFLOP/s in all (rounds: %s) → %.0f samples/s, "
                       "a 60,000-example epoch in %.0f ms  " % (
                           precision, precision, gflops, ", ".join(
                               "%.0f" % g for g in meta["floors"][precision]), rate,
                           60000 / rate * 1e3))
    for cond, gflops in (meta.get("co_runner_floors") or {}).items():
        if gflops:
            rate = median(gflops) * 1e9 / FLOP_PER_EXAMPLE["mlp"]
            out.append("Floor float32 beside the %s: the same copies timed by the wall clock while "
                       "the co-runner spins: %.0f GFLOP/s in all (rounds: %s) → %.0f samples/s  "
                       % (cond, median(gflops), ", ".join("%.0f" % g for g in gflops), rate))
    wide = median(meta.get("wide_floors") or [])
    stream = median(meta.get("update_streams") or [])
    if wide:
        out.append("Wide floor float32: oneDNN's own matmuls on the wide step's eight shapes (batch "
                   "128; the faster of plain operands and oneDNN's preferred layouts), one pinned "
                   "copy per core at once, wall clock: %.0f GFLOP/s in all "
                   "(rounds: %s) → %.0f samples/s  " % (
                       wide, ", ".join("%.0f" % g for g in meta["wide_floors"]),
                       wide * 1e9 / FLOP_PER_EXAMPLE["wide"]))
    if stream:
        out.append("Update stream: a pass reading a gradient, a weight and two moments and writing "
                   "the three (28 bytes an element), one pinned copy per core over half the wide "
                   "model's weights each: %.1f GB/s in all (rounds: %s); the %d bytes a weight "
                   "any Adam pass must move take %.2f ms for the wide model's %d weights  " % (
                       stream, ", ".join("%.1f" % g for g in meta["update_streams"]),
                       UPDATE_BYTES, UPDATE_BYTES * WIDE_WEIGHTS / stream / 1e6, WIDE_WEIGHTS))
    peaks = meta.get("fma_peaks") or []
    f32 = floors(meta).get("float32")
    if peaks and f32:
        out.append("FMA peak: float32 fused multiply-adds as wide as the ISA cap allows (AVX-512, "
                   "else AVX2) with no memory traffic, one pinned "
                   "copy per core at once (ops_bench BM_FmaPeak): %.0f GFLOP/s in all; the float32 "
                   "floor is %.0f%% of it  " % (median(peaks), 100 * f32 / median(peaks)))
    return out


def comparison_table(rows):
    out = ["| model | configuration | global batch | samples/s (steady, median) | best round | "
           "epoch s | first epoch s | peak RSS MB | of floor |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if r["condition"] != "quiet" or (r["kind"] == "torch" and r.get("group") and
                                         not r.get("tuned")):
            continue
        out.append("| %s | %s | %d | %.0f | %.0f | %.3f | %.3f | %.0f | %s |" % (
            r["model"], r["name"], r["global_batch"], r["samples_per_s"], r["best_samples_per_s"],
            r["epoch_s"], r["first_epoch_s"], r["peak_rss_mb"],
            "%.0f%%" % (100 * r["floor_fraction"]) if r.get("floor_fraction") else "—"))
    return out


def grid_table(rows):
    grid = [r for r in rows if r["kind"] == "torch" and r.get("group") and not r.get("tuned")]
    if not grid:
        return []
    out = ["PyTorch grid (the tuned rows take each round's best point; medians here):", "",
           "| model | peer | intra-op + BLAS threads, batch | condition | samples/s (median) | "
           "best round | peak RSS MB |", "|---|---|---|---|---:|---:|---:|"]
    for r in grid:
        out.append("| %s | %s | %s | %s | %.0f | %.0f | %.0f |" % (
            r["model"], r["group"], r["tuning"], r["condition"], r["samples_per_s"],
            r["best_samples_per_s"], r["peak_rss_mb"]))
    return out


def co_runner_table(rows, meta):
    noisy = [r for r in rows if r["condition"] in CO_RUNNERS]
    if not noisy:
        return []
    session = ("in the run's session: the kernel shares the cores per thread"
               if meta.get("co_runner_session", "own") == "same" else
               "in another session than the run's: with autogroups the kernel gives each "
               "session half the machine")
    out = ["Beside one spinning co-runner (`sh -c 'while :; do :; done'`, %s), unpinned and "
           "pinned to one core (`taskset -c 0`), each run right after its quiet run; fraction = "
           "the rate "
           "under the co-runner / the same row's quiet rate, same run (tuned PyTorch re-tuned "
           "under the co-runner):" % session, "",
           "| model | configuration | quiet samples/s | co-runner | of quiet | co-runner pinned "
           "| of quiet |", "|---|---|---:|---:|---:|---:|---:|"]
    keys = []
    for r in noisy:
        k = (r["model"], r.get("group") if r.get("tuned") else r["name"], bool(r.get("tuned")))
        if k not in keys:
            keys.append(k)
    for model, name, tuned in keys:
        def find(cond):
            for r in rows:
                if r["model"] == model and r["condition"] == cond and bool(r.get("tuned")) == tuned \
                        and (r.get("group") if tuned else r["name"]) == name:
                    return r
            return None
        q, u, p = find("quiet"), find("co-runner"), find("co-runner pinned")
        if tuned and not any(x and x.get("tuned") for x in (q,)):
            continue
        if not tuned and q and q["kind"] == "torch":
            continue  # grid points: in the grid table
        label = "%s tuned (won quiet: %s; co-runner: %s; pinned: %s)" % (
            name, *(x["winner"] if x else "—" for x in (q, u, p))) if tuned else name

        def cell(x):
            if not x:
                return "— | —"
            return "%.0f | %s" % (x["samples_per_s"],
                                  "%.2f" % x["of_quiet"] if "of_quiet" in x else "—")
        out.append("| %s | %s | %s | %s | %s |" % (
            model, label, "%.0f" % q["samples_per_s"] if q else "—", cell(u), cell(p)))
    limits = []
    for cond in CO_RUNNERS:
        floor = co_runner_floor_rate(meta, cond)
        a = pick(rows, "mlp", cond, system="Lockstep", defaults=True, precision="float32")
        if floor:
            limits.append("%s %.0f samples/s%s" % (cond, floor, ", all-core Lockstep at %.0f%% of "
                                                   "it" % (100 * a[0]["samples_per_s"] / floor)
                                                   if a else ""))
    if limits:
        out += ["", "The float32 floor beside the co-runner (the quiet floor's copies, one per "
                "core, timed by the wall clock while it spins): " + "; ".join(limits) + "."]
    return out


def allreduce_table(rows):
    """The cross-worker all-reduce against its ring floor, and (one worker, several replicas) the
    step's local sum-and-update pass: the update adds the replicas' gradients as it reads them, so
    that time is the optimizer's pass, with no separate reduction to hold against a floor."""
    rows = [r for r in rows if r.get("allreduce_seconds_per_step") and r.get("replicas", 1) > 1
            and r["condition"] == "quiet"]
    if not rows:
        return []
    out = []
    mpi = [r for r in rows if (r.get("workers") or 1) > 1]
    if mpi:
        out += ["Gradient all-reduce across workers per step (median over rounds; wall time on "
                "local replica 0, waiting for the slowest participant included) against the ring "
                "floor 2(n-1)/n · bytes / %.0f GB/s:" % (COPY_BANDWIDTH / 1e9), "",
                "| model | configuration | workers | bytes/step | all-reduce µs/step "
                "| ring floor µs | floor / measured |", "|---|---|---:|---:|---:|---:|---:|"]
        for r in mpi:
            n = r["workers"]
            floor = 2.0 * (n - 1) / n * r["allreduce_bytes_per_step"] / COPY_BANDWIDTH
            t = r["allreduce_seconds_per_step"]
            out.append("| %s | %s | %d | %d | %.1f | %.1f | %.0f%% |" % (
                r["model"], r["name"], n, r["allreduce_bytes_per_step"], t * 1e6, floor * 1e6,
                100 * floor / t))
    local = [r for r in rows if (r.get("workers") or 1) == 1]
    if local:
        if out:
            out.append("")
        out += ["One worker: the replicas' gradients summed as the optimizer's update reads them "
                "(one pass, no separate reduction; median over rounds, wall time on local "
                "replica 0):", "",
                "| model | configuration | replicas | gradient bytes/step | sum and update µs/step |",
                "|---|---|---:|---:|---:|"]
        for r in local:
            out.append("| %s | %s | %d | %d | %.1f |" % (
                r["model"], r["name"], r.get("local_replicas") or r["replicas"],
                r["allreduce_bytes_per_step"], r["allreduce_seconds_per_step"] * 1e6))
    return out


def pick(rows, model, condition="quiet", **want):
    def ok(r):
        if r["model"] != model or r["condition"] != condition:
            return False
        return all((r.get(k) or False) == v if isinstance(v, bool) else r.get(k) == v
                   for k, v in want.items())
    return [r for r in rows if ok(r)]


def fastest(rows):
    return max(rows, key=lambda r: r["samples_per_s"]) if rows else None


def all_core_f32(rows, model, condition="quiet"):
    """Lockstep's all-core float32 rows of one process (MPI and the baseline binary apart)."""
    return [r for r in pick(rows, model, condition, system="Lockstep", precision="float32",
                            mpi=False, baseline=False, profiler=False) if r["replicas"] > 1]


def speed_checks(rows, meta):
    checks = []
    for model, target in (("mlp", 2.5), ("wide", 1.5), ("conv", 2.0)):
        a = fastest(all_core_f32(rows, model))
        t = fastest(pick(rows, model, tuned=True))
        if a and t:
            checks.append(check("%s: all-core float32 (%s) ≥ %.1fx the best tuned PyTorch (%s)" % (
                model, a["name"], target, t["name"]), a, t, target))
        torch_rss = [r["peak_rss_mb"] for r in pick(rows, model, system="PyTorch")]
        if a and torch_rss:
            checks.append(("%s: peak RSS ≤ PyTorch's (smallest PyTorch RSS / all-core Lockstep "
                           "RSS)" % model, min(torch_rss) / a["peak_rss_mb"], 1.0))
    checks += wide_limit_checks(rows, meta)
    for precision, group, target in (("float32", "PyTorch", 2.5),
                                     ("mixed_bfloat16", "PyTorch bf16 autocast", 1.5)):
        vit = pick(rows, "vit", system="Lockstep", defaults=True, precision=precision)
        t = pick(rows, "vit", tuned=True, group=group)
        if vit and t:
            checks.append(check("vit: all-core %s ≥ %.1fx the tuned %s (%s)" % (
                precision, target, group, t[0]["name"]), vit[0], t[0], target))
    a = fastest(all_core_f32(rows, "mlp"))
    if a and a.get("floor_fraction"):
        by_round = rates_by_round(meta, meta.get("floors", {}).get("float32"),
                                  FLOP_PER_EXAMPLE["mlp"])
        checks.append(("mlp: all-core float32 ≥ 75%% of the float32 floor (%s)" % a["name"],
                       a["floor_fraction"], 0.75, round_ratio(a, {"by_round": by_round})))
    f32 = pick(rows, "mlp", system="Lockstep", defaults=True, precision="float32")
    bf16 = pick(rows, "mlp", system="Lockstep", defaults=True, precision="mixed_bfloat16")
    if f32 and bf16:
        # What the chip offers bfloat16 over float32 is the ratio of this run's floors; where it
        # has no bfloat16 kernels (no bfloat16 floor) the policy must at least not cost speed.
        fl = floors(meta)
        gain = fl["bfloat16"] / fl["float32"] if fl.get("bfloat16") and fl.get("float32") else 0
        target = max(0.95, 0.85 * gain)
        ratio = "%.2f" % gain if gain else "none: no bfloat16 floor in this run"
        checks.append(check("mlp: mixed_bfloat16 / float32 ≥ max(0.95, 0.85 × bfloat16 floor / "
                            "float32 floor = %s) (all-core defaults, same run)" % ratio,
                            bf16[0], f32[0], target))
        if "test_accuracy" in f32[0] and "test_accuracy" in bf16[0]:
            gap = 100 * abs(f32[0]["test_accuracy"] - bf16[0]["test_accuracy"])
            note = "" if meta["epochs"] == 5 else " — measured after %d epochs, not 5" % \
                meta["epochs"]
            checks.append(("mlp: mixed_bfloat16 test accuracy within 0.5 points of float32 "
                           "(%.4f vs %.4f; margin = 0.5 − gap)%s" % (
                               bf16[0]["test_accuracy"], f32[0]["test_accuracy"], note),
                           0.5 - gap, 0.0))
    ddp = pick(rows, "mlp", mode="ddp")
    if a and ddp:
        checks.append(check("mlp: all-core ≥ 4x PyTorch DDP", a, ddp[0], 4.0))
    profiled = pick(rows, "mlp", system="Lockstep", profiler=True)
    if f32 and profiled:
        checks.append(check("mlp: step profiler on ≥ 0.97x off (all-core defaults with --profile, "
                            "same run)", profiled[0], f32[0], 0.97))
    base = pick(rows, "mlp", system="Lockstep", baseline=True)
    if f32 and base:
        checks.append(check("mlp: quiet all-core defaults ≥ the baseline binary's (no slower than "
                            "before)", f32[0], base[0], 1.0))
    return checks


def wide_limit_checks(rows, meta):
    """What the machine allows the wide model against the tuned PyTorch: its matmuls alone at
    oneDNN's wide floor; every flop of the step at the FMA peak (nothing on this chip does more);
    and that peak with the update's compulsory bytes at the measured bandwidth after it (a step
    that does not overlap the two)."""
    a = fastest(all_core_f32(rows, "wide"))
    t = fastest(pick(rows, "wide", tuned=True))
    wide = median(meta.get("wide_floors") or [])
    if not (a and t and wide):
        return []
    flop = FLOP_PER_EXAMPLE["wide"]
    rate = wide * 1e9 / flop
    checks = [("wide: oneDNN's float32 floor on the wide step's shapes, matmuls only, ≥ 1.5x the "
               "best tuned PyTorch (all-core Lockstep at %.0f%% of it)" % (
                   100 * a["samples_per_s"] / rate), rate / t["samples_per_s"], 1.5)]
    peak = median(meta.get("fma_peaks") or [])
    if peak:
        checks.append(("wide: every flop of the step at the FMA peak and nothing else ≥ 1.5x the "
                       "best tuned PyTorch (the hard limit)",
                       peak * 1e9 / flop / t["samples_per_s"], 1.5))
    stream = median(meta.get("update_streams") or [])
    if peak and stream:
        batch = a["global_batch"]
        step = batch * flop / (peak * 1e9) + UPDATE_BYTES * WIDE_WEIGHTS / (stream * 1e9)
        checks.append(("wide: the FMA peak, then %d bytes a weight at the measured bandwidth, ≥ "
                       "1.5x the best tuned PyTorch (the limit of a step that does not overlap "
                       "its update with its matmuls; global batch %d)" % (UPDATE_BYTES, batch),
                       batch / step / t["samples_per_s"], 1.5))
    return checks


def co_runner_floor_rate(meta, cond):
    """The float32 floor beside the co-runner `cond` in samples/s (median over rounds), or None."""
    gflops = median((meta.get("co_runner_floors") or {}).get(cond) or [])
    return gflops * 1e9 / FLOP_PER_EXAMPLE["mlp"] if gflops else None


def co_runner_checks(rows, meta=None):
    checks = []
    for cond in CO_RUNNERS:
        a = pick(rows, "mlp", cond, system="Lockstep", defaults=True, precision="float32")
        one = [r for r in pick(rows, "mlp", cond, system="Lockstep", precision="float32",
                               mpi=False, baseline=False) if r["replicas"] == 1]
        mpi = pick(rows, "mlp", cond, mpi=True)
        t = fastest(pick(rows, "mlp", cond, tuned=True))
        floor = co_runner_floor_rate(meta or {}, cond)
        if a and "of_quiet" in a[0]:
            checks.append(("%s: all-core keeps ≥ 60%% of its quiet rate" % cond,
                           a[0]["of_quiet"], 0.60, a[0].get("of_quiet_by_round")))
        if a and t:
            checks.append(check("%s: all-core ≥ 2x the best tuned PyTorch under it (%s)" % (
                cond, t["name"]), a[0], t, 2.0))
        if floor and t:
            # A step of nothing but its matmuls on the cores the scheduler leaves to two threads:
            # below 2x, the 2x target is beyond this machine beside this co-runner.
            by_round = rates_by_round(meta, (meta or {}).get("co_runner_floors", {}).get(cond),
                                      FLOP_PER_EXAMPLE["mlp"])
            checks.append(("%s: the float32 floor beside it ≥ 2x the best tuned PyTorch under it "
                           "(the limit: FAIL here means 2x is out of reach beside this co-runner)"
                           % cond, floor / t["samples_per_s"], 2.0,
                           round_ratio({"by_round": by_round}, t)))
        if a and one:
            checks.append(check("%s: all-core ≥ 1 replica under it" % cond, a[0], one[0], 1.0))
        if mpi and "of_quiet" in mpi[0]:
            checks.append(("%s: mpirun -np 2 (2 x 1) keeps ≥ 50%% of its quiet rate" % cond,
                           mpi[0]["of_quiet"], 0.50, mpi[0].get("of_quiet_by_round")))
    return checks


def checks_table(title, checks):
    """A check is (text, value, target) or, for a ratio of two rows' rates, (text, value, target,
    the median of the per-round ratios or None): each measure gets its verdict."""
    if not checks:
        return []
    lines = [title, "", "| target | ratio of medians | | median of per-round ratios | | target |",
             "|---|---:|---|---:|---|---:|"]
    for text, value, target, *rest in checks:
        per_round = rest[0] if rest else None
        lines.append("| %s | %.2f | %s | %s | %s | %.2f |" % (
            text, value, "pass" if value >= target else "FAIL",
            "—" if per_round is None else "%.2f" % per_round,
            "" if per_round is None else "pass" if per_round >= target else "FAIL", target))
    return lines


def failures(meta):
    """Failed or timed-out runs, one line per configuration with its conditions and counts."""
    if not meta.get("failures"):
        return []
    grouped = {}
    for f in meta["failures"]:
        name, _, condition = f["id"].rpartition(" [")
        key = (name, f["error"])
        grouped.setdefault(key, []).append(condition.rstrip("]"))
    lines = []
    for (name, error), conditions in grouped.items():
        counts = {}
        for c in conditions:
            counts[c] = counts.get(c, 0) + 1
        lines.append("- %s — %s: %s" % (name, error, ", ".join(
            "%s %d/%d rounds" % (c, n, meta["rounds"]) for c, n in counts.items())))
    return ["Runs that failed or timed out, left out of the medians (a timed-out PyTorch grid point "
            "was slower than every point that finished):", ""] + lines


def render(meta, rows):
    out = header(meta) + [""] + comparison_table(rows)
    for part in (grid_table(rows), co_runner_table(rows, meta), allreduce_table(rows),
                 checks_table("Speed targets (this run; a round's runs are minutes apart, so the "
                              "per-round ratios cancel the VM's slow and fast hours):",
                              speed_checks(rows, meta)),
                 checks_table("Co-runner targets (this run):",
                              co_runner_checks(rows, meta)),
                 failures(meta)):
        if part:
            out += [""] + part
    return "\n".join(out) + "\n"
