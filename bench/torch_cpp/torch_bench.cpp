// The PyTorch C++ frontend (libtorch) peer of `lockstep train`: the same models on the same
// Fashion-MNIST files, fed the fastest way (bench/torch_bench.py's "fast" mode): the whole training
// set as one float32 tensor, a shuffled index per epoch, an index_select per batch; cross-entropy
// on the logits (= softmax + categorical cross-entropy on one-hot labels), Adam(lr 1e-3).
//
//   OPENBLAS_NUM_THREADS=2 OMP_NUM_THREADS=1 torch_cpp_bench --model mlp --threads 1
//       --global-batch 256 --epochs 4 --out result.json
//
// Threads: --threads sets torch's intra-op pool (at::set_num_threads); OpenBLAS' own threads come
// from OPENBLAS_NUM_THREADS, read when the library loads, so the caller sets it (scripts/bench
// does). Writes one JSON object: seconds_per_epoch, global_batch_size, steps_per_epoch, loss,
// peak_rss_kb, torch_threads, blas_threads.
#include <sys/resource.h>
#include <torch/torch.h>
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string model = "mlp";
  int threads = 1;
  int64_t global_batch = 128;
  int epochs = 4;
  int64_t steps_per_epoch = 0;
  uint64_t seed = 0;
  std::string data_dir = "/usr/share/datasets/fashion-mnist";
  std::string out;
  bool keep_denormals = false;
};

std::vector<uint8_t> read_gzip(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path);
  std::vector<uint8_t> data;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(f, buf, sizeof buf)) > 0) data.insert(data.end(), buf, buf + n);
  gzclose(f);
  if (n < 0) throw std::runtime_error("cannot decompress " + path);
  return data;
}

// An IDX file (big-endian header: magic with the rank in its last byte, then the dimensions) as a
// uint8 tensor of its shape.
torch::Tensor read_idx(const std::string& path) {
  std::vector<uint8_t> raw = read_gzip(path);
  if (raw.size() < 4) throw std::runtime_error(path + ": not an IDX file");
  const int rank = raw[3];
  std::vector<int64_t> dims;
  size_t offset = 4 + 4 * static_cast<size_t>(rank);
  if (raw.size() < offset) throw std::runtime_error(path + ": truncated IDX header");
  int64_t count = 1;
  for (int i = 0; i < rank; ++i) {
    const uint8_t* d = raw.data() + 4 + 4 * i;
    dims.push_back((int64_t{d[0]} << 24) | (int64_t{d[1]} << 16) | (int64_t{d[2]} << 8) | d[3]);
    count *= dims.back();
  }
  if (raw.size() - offset != static_cast<size_t>(count))
    throw std::runtime_error(path + ": payload does not match the header's dimensions");
  return torch::from_blob(raw.data() + offset, dims, torch::kUInt8).clone();
}

struct NetImpl : torch::nn::Module {
  explicit NetImpl(const std::string& name) : conv(name == "conv") {
    if (name == "mlp") {
      body = torch::nn::Sequential(torch::nn::Linear(784, 128), torch::nn::ReLU(),
                                   torch::nn::Linear(128, 10));
    } else if (name == "wide") {
      body = torch::nn::Sequential(torch::nn::Linear(784, 2048), torch::nn::ReLU(),
                                   torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                                   torch::nn::Linear(2048, 10));
    } else if (name == "conv") {
      body = torch::nn::Sequential(torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 32, 3)),
                                   torch::nn::ReLU(), torch::nn::MaxPool2d(2), torch::nn::Flatten(),
                                   torch::nn::Linear(32 * 13 * 13, 10));
    } else {
      throw std::invalid_argument("--model: expected mlp, wide or conv. Received: " + name);
    }
    register_module("body", body);
  }
  torch::Tensor forward(torch::Tensor x) {
    return body->forward(conv ? x.view({-1, 1, 28, 28}) : x);
  }
  bool conv;
  torch::nn::Sequential body{nullptr};
};
TORCH_MODULE(Net);

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--keep-denormals") {
      o.keep_denormals = true;
      continue;
    }
    if (i + 1 >= argc) throw std::invalid_argument(a + ": expected a value");
    const std::string v = argv[++i];
    if (a == "--model")
      o.model = v;
    else if (a == "--threads")
      o.threads = std::stoi(v);
    else if (a == "--global-batch")
      o.global_batch = std::stoll(v);
    else if (a == "--epochs")
      o.epochs = std::stoi(v);
    else if (a == "--steps-per-epoch")
      o.steps_per_epoch = std::stoll(v);
    else if (a == "--seed")
      o.seed = std::stoull(v);
    else if (a == "--data-dir")
      o.data_dir = v;
    else if (a == "--out")
      o.out = v;
    else
      throw std::invalid_argument("unknown option " + a);
  }
  if (o.out.empty()) throw std::invalid_argument("--out is required");
  if (o.threads < 1 || o.global_batch < 1 || o.epochs < 1)
    throw std::invalid_argument("--threads, --global-batch and --epochs must be positive");
  return o;
}

int run(const Options& o) {
  torch::set_num_threads(o.threads);
  // Subnormals flushed as Lockstep flushes them (docs/keras-compat.md); --keep-denormals leaves
  // PyTorch's default.
  at::globalContext().setFlushDenormal(!o.keep_denormals);
  torch::manual_seed(o.seed);
  torch::Tensor x = read_idx(o.data_dir + "/train-images-idx3-ubyte.gz")
                        .reshape({-1, 784})
                        .to(torch::kFloat32)
                        .div_(255.0);
  torch::Tensor y = read_idx(o.data_dir + "/train-labels-idx1-ubyte.gz").to(torch::kInt64);
  const int64_t steps = o.steps_per_epoch ? o.steps_per_epoch : x.size(0) / o.global_batch;
  if (steps * o.global_batch > x.size(0))
    throw std::invalid_argument("--steps-per-epoch x --global-batch exceeds the training set");
  Net model(o.model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(1e-3));
  std::vector<double> times;
  torch::Tensor loss;
  for (int epoch = 0; epoch < o.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    torch::manual_seed(o.seed + static_cast<uint64_t>(epoch));
    torch::Tensor perm = torch::randperm(x.size(0), torch::kInt64);
    for (int64_t s = 0; s < steps; ++s) {
      torch::Tensor idx = perm.slice(0, s * o.global_batch, (s + 1) * o.global_batch);
      torch::Tensor xb = x.index_select(0, idx), yb = y.index_select(0, idx);
      opt.zero_grad();
      loss = torch::nn::functional::cross_entropy(model->forward(xb), yb);
      loss.backward();
      opt.step();
    }
    const double last = loss.item<double>();  // waits for nothing on a CPU, reads the result
    (void)last;
    times.push_back(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const char* blas = std::getenv("OPENBLAS_NUM_THREADS");
  nlohmann::json out = {{"seconds_per_epoch", times},      {"global_batch_size", o.global_batch},
                        {"steps_per_epoch", steps},        {"loss", loss.item<double>()},
                        {"peak_rss_kb", usage.ru_maxrss},  {"torch_threads", o.threads},
                        {"blas_threads", blas ? blas : ""}};
  std::ofstream(o.out) << out.dump() << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(parse(argc, argv));
  } catch (const std::exception& e) {
    std::cerr << "torch_cpp_bench: " << e.what() << "\n";
    return 1;
  }
}
