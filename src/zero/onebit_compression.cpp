#include "zero/onebit_compression.h"

#include <numeric>

#include "core/error.h"

namespace zt {

namespace {

// The signs travel as 32-bit words; the communicators only copy them.
constexpr DType kWordDType = DType::kF32;
static_assert(sizeof(uint32_t) == sizeof(float));

size_t words_for(size_t chunk) { return (chunk + 31) / 32; }

}  // namespace

OneBitCompression::Plan OneBitCompression::plan(const std::vector<std::pair<size_t, size_t>>& tensors, int ranks) {
  Plan p;
  for (const auto& [lo, hi] : tensors) {
    const size_t padded = padded_size(hi - lo, ranks), chunk = padded / size_t(ranks);
    p.tensors.push_back({hi - lo, padded, chunk, p.worker_error, p.server_error, p.block_words});
    p.worker_error += padded;
    p.server_error += chunk;
    p.block_words += words_for(chunk);
  }
  return p;
}

std::vector<std::pair<size_t, size_t>> onebit_tensors(const OptimizerConfig& optimizer, const ParamLayout& layout) {
  if (optimizer.type != OptimizerConfig::Type::kOneBitLamb) return layout.tensor_ranges();
  size_t total = 0;
  for (const auto& [lo, hi] : layout.tensor_ranges()) total += hi - lo;
  return {{0, total}};
}

size_t OneBitCompression::padded_size(size_t n, int ranks) {
  // DeepSpeed's divider lcm(ranks, 8): every chunk packs into whole bytes there.
  const size_t p = size_t(ranks), unit = p * (p * 8 / std::gcd(p, size_t(8)));
  return (n + unit - 1) / unit * unit;
}

std::vector<size_t> OneBitCompression::device_allocations(const std::vector<std::pair<size_t, size_t>>& tensors,
                                                          int ranks) {
  if (ranks <= 1) return {};  // nothing is compressed on one rank
  const Plan e = plan(tensors, ranks);
  const size_t p = size_t(ranks), t = tensors.size();
  std::vector<size_t> bytes{e.worker_error * sizeof(float), e.server_error * sizeof(float)};
  for (int k = 0; k < 3; ++k) bytes.push_back(p * e.block_words * sizeof(uint32_t));  // sent, received, gathered
  for (int k = 0; k < 2; ++k) bytes.push_back(p * t * sizeof(float));                 // the scales
  bytes.push_back(2 * t * sizeof(double));
  return bytes;
}

size_t OneBitCompression::device_bytes(const std::vector<std::pair<size_t, size_t>>& tensors, int ranks) {
  const std::vector<size_t> a = device_allocations(tensors, ranks);
  return std::accumulate(a.begin(), a.end(), size_t(0));
}

OneBitCompression::OneBitCompression(Backend& backend, DataComm& comm,
                                     const std::vector<std::pair<size_t, size_t>>& tensors)
    : backend_(backend), comm_(comm), compute_(backend.compute_stream()), ops_(backend.optimizer_ops()),
      ranks_(comm.size()), rank_(comm.rank()), tensors_(tensors) {
  ZT_CHECK(ranks_ > 1, "a 1-bit compressed all-reduce over one rank");
  Plan sizes = plan(tensors_, ranks_);
  layout_ = std::move(sizes.tensors);
  block_words_ = sizes.block_words;
  const size_t p = size_t(ranks_), t = tensors_.size();
  worker_error_ = DeviceArray<float>(backend, sizes.worker_error);
  server_error_ = DeviceArray<float>(backend, sizes.server_error);
  send_ = DeviceArray<uint32_t>(backend, p * block_words_);
  recv_ = DeviceArray<uint32_t>(backend, p * block_words_);
  server_signs_ = DeviceArray<uint32_t>(backend, p * block_words_);
  worker_scales_ = DeviceArray<float>(backend, p * t);
  server_scales_ = DeviceArray<float>(backend, p * t);
  sums_ = DeviceArray<double>(backend, 2 * t);
  reset_errors();
}

void OneBitCompression::reset_errors() {
  backend_.zero_async(worker_error_.data(), worker_error_.bytes(), compute_);
  backend_.zero_async(server_error_.data(), server_error_.bytes(), compute_);
}

void OneBitCompression::read_errors(float* out) {
  backend_.copy_to_host(out, worker_error_.data(), worker_error_.bytes());
  backend_.copy_to_host(out + worker_error_.size(), server_error_.data(), server_error_.bytes());
}

void OneBitCompression::load_errors(const float* in) {
  backend_.copy_from_host(worker_error_.data(), in, worker_error_.bytes());
  backend_.copy_from_host(server_error_.data(), in + worker_error_.size(), server_error_.bytes());
}

void OneBitCompression::all_reduce(const OptimizerStepArgs& args, float* exp_avg, const void* grad, DType grad_dtype) {
  const size_t t_count = tensors_.size(), p = size_t(ranks_), me = size_t(rank_);
  double* worker_sums = sums_.data();
  double* server_sums = sums_.data() + t_count;
  backend_.zero_async(sums_.data(), sums_.bytes(), compute_);
  const auto* g = static_cast<const unsigned char*>(grad);
  for (size_t t = 0; t < t_count; ++t) {
    const Layout& l = layout_[t];
    const size_t lo = tensors_[t].first;
    ops_.onebit_momentum_sums(args, exp_avg + lo, g ? g + lo * dtype_size(grad_dtype) : nullptr, grad_dtype, l.n,
                              worker_error_.data() + l.error_at, l.padded, worker_sums + t);
  }
  // Every block carries the same worker scale: one slot, this rank's, in the gathered scales.
  for (size_t t = 0; t < t_count; ++t) {
    const Layout& l = layout_[t];
    const SignBlocks out{send_.data(), block_words_, l.word0, worker_scales_.data() + me * t_count + t, 0, l.chunk, p};
    ops_.onebit_compress(exp_avg + tensors_[t].first, l.n, worker_error_.data() + l.error_at, l.padded,
                         worker_sums + t, out);
  }
  const std::vector<size_t> per_rank_scales(p, t_count), per_rank_words(p, block_words_);
  comm_.all_to_all(send_.data(), recv_.data(), block_words_, kWordDType, compute_)->wait(compute_);
  comm_.all_gather(worker_scales_.data() + me * t_count, worker_scales_.data(), per_rank_scales, DType::kF32, compute_)
      ->wait(compute_);
  for (size_t t = 0; t < t_count; ++t) {
    const Layout& l = layout_[t];
    const SignBlocks in{recv_.data(), block_words_, l.word0, worker_scales_.data() + t, t_count, l.chunk, p};
    ops_.onebit_server_sums(in, server_error_.data() + l.server_at, server_sums + t);
    const SignBlocks out{server_signs_.data() + me * block_words_, block_words_, l.word0,
                         server_scales_.data() + me * t_count + t, 0, l.chunk, 1};
    ops_.onebit_compress(nullptr, 0, server_error_.data() + l.server_at, l.chunk, server_sums + t, out);
  }
  comm_.all_gather(server_signs_.data() + me * block_words_, server_signs_.data(), per_rank_words, kWordDType,
                   compute_)->wait(compute_);
  comm_.all_gather(server_scales_.data() + me * t_count, server_scales_.data(), per_rank_scales, DType::kF32, compute_)
      ->wait(compute_);
}

SignBlocks OneBitCompression::gathered(size_t t) {
  const Layout& l = layout_[t];
  return {server_signs_.data(), block_words_, l.word0, server_scales_.data() + t, tensors_.size(), l.chunk,
          size_t(ranks_)};
}

}  // namespace zt
