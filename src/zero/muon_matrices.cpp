#include "zero/muon_matrices.h"

#include <algorithm>
#include <cstdint>
#include <numeric>

#include "core/error.h"

namespace zt {

namespace {

size_t overlap(size_t lo, size_t hi, const std::pair<size_t, size_t>& r) {
  const size_t a = std::max(lo, r.first), b = std::min(hi, r.second);
  return b > a ? b - a : 0;
}

bool holds_whole(const MuonMatrices::Matrix& m, const std::pair<size_t, size_t>& r) {
  return r.first <= m.lo && m.hi <= r.second;
}

// The pieces of a gather (each rank's part of the matrices owned elsewhere, to their owners) and
// of a return (each owner's results, to every other rank holding part of them; at stage 0, where
// every rank holds everything, one piece per matrix that every other rank takes).
std::pair<std::vector<MuonMatrices::Piece>, std::vector<MuonMatrices::Piece>> pieces_of(
    const std::vector<MuonMatrices::Matrix>& matrices, const std::vector<std::pair<size_t, size_t>>& held) {
  std::vector<MuonMatrices::Piece> gather, back;
  for (size_t k = 0; k < matrices.size(); ++k) {
    const MuonMatrices::Matrix& m = matrices[k];
    const bool owner_holds = holds_whole(m, held[size_t(m.owner)]);
    const bool everywhere = held.size() > 1 && held.front() == held.back();
    if (everywhere) {
      back.push_back({k, m.lo, m.hi, m.owner, MuonMatrices::kEveryone});
      continue;
    }
    for (int r = 0; r < int(held.size()); ++r) {
      if (r == m.owner) continue;
      const size_t a = std::max(m.lo, held[size_t(r)].first), b = std::min(m.hi, held[size_t(r)].second);
      if (b <= a) continue;
      if (!owner_holds) gather.push_back({k, a, b, r, m.owner});
      back.push_back({k, a, b, m.owner, r});
    }
  }
  return {gather, back};
}

}  // namespace

std::vector<std::pair<size_t, size_t>> MuonMatrices::held_ranges(const ZeroPlan& plan) {
  std::vector<std::pair<size_t, size_t>> held;
  for (int r = 0; r < plan.world; ++r) {
    if (plan.optimizer_replicated()) {
      held.emplace_back(0, plan.partition.padded_size);
    } else {
      held.emplace_back(plan.partition.begin(r), plan.partition.end(r));
    }
  }
  return held;
}

std::vector<MuonMatrices::Matrix> MuonMatrices::assign(const std::vector<std::pair<size_t, size_t>>& tensors,
                                                       const std::vector<TensorShape>& shapes,
                                                       const std::vector<std::pair<size_t, size_t>>& held,
                                                       const OptimizerConfig& opt) {
  ZT_CHECK(tensors.size() == shapes.size(), "one shape per tensor");
  std::vector<Matrix> matrices;
  for (size_t t = 0; t < tensors.size(); ++t) {
    if (!shapes[t].hidden_matrix) continue;
    matrices.push_back({t, tensors[t].first, tensors[t].second, shapes[t].rows, shapes[t].cols, -1});
  }
  if (matrices.empty()) {
    throw UsageError("optimizer Muon needs hidden 2-D weight matrices, and this model has none (its 2-D tensors "
                     "are embeddings and heads, which Muon's AdamW steps): pick AdamW, Lion, Adagrad or Lamb");
  }
  const int world = int(held.size());
  std::vector<double> cost(matrices.size());
  for (size_t k = 0; k < matrices.size(); ++k) {
    cost[k] = NewtonSchulz::cost(opt.ns_method, opt.ns_steps, matrices[k].rows, matrices[k].cols);
  }
  // Largest first (longest-processing-time), ties in flat order: the same on every rank.
  std::vector<size_t> order(matrices.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return cost[a] > cost[b]; });
  const double target = std::accumulate(cost.begin(), cost.end(), 0.0) / world;
  std::vector<double> load(size_t(world), 0.0);
  // A matrix stays with the rank holding most of it while that rank is under its share (nothing
  // moves), except at stage 0 where every rank holds everything and none is home.
  const bool replicated = world > 1 && held.front() == held.back();
  for (size_t k : order) {
    if (replicated) break;
    int home = -1;
    size_t best = 0;
    for (int r = 0; r < world; ++r) {
      const size_t o = overlap(matrices[k].lo, matrices[k].hi, held[size_t(r)]);
      if (o > best) best = o, home = r;
    }
    if (home < 0) continue;
    if (load[size_t(home)] == 0 || load[size_t(home)] + cost[k] <= target * 1.02) {
      matrices[k].owner = home;
      load[size_t(home)] += cost[k];
    }
  }
  for (size_t k : order) {
    if (matrices[k].owner >= 0) continue;
    const int r = int(std::min_element(load.begin(), load.end()) - load.begin());
    matrices[k].owner = r;
    load[size_t(r)] += cost[k];
  }
  return matrices;
}

size_t MuonMatrices::Exchange::total() const { return std::accumulate(counts.begin(), counts.end(), size_t(0)); }

MuonMatrices::Exchange MuonMatrices::make_exchange(std::vector<Piece> pieces, int world) {
  std::stable_sort(pieces.begin(), pieces.end(), [](const Piece& a, const Piece& b) { return a.from < b.from; });
  Exchange x;
  x.counts.assign(size_t(world), 0);
  for (const Piece& p : pieces) {
    x.offset.push_back(x.counts[size_t(p.from)]);
    x.counts[size_t(p.from)] += p.hi - p.lo;
  }
  x.pieces = std::move(pieces);
  return x;
}

namespace {

// What one rank allocates: the updates over its range, the assembly of the matrices it owns but
// does not hold whole, the send and receive staging, and Newton-Schulz's workspace.
struct MuonSizes {
  size_t updates = 0, assembly = 0, send = 0, recv = 0, max_elements = 0, max_side = 0;
};

// The elements each rank contributes to one all-gather round: one collective's worth, split
// evenly over the ranks.
size_t round_elements(size_t collective_elements, int world) {
  return std::max<size_t>(1, collective_elements / size_t(world));
}

template <typename Exchange>
size_t round_total(const Exchange& x, size_t round) {  // the first round's, the largest
  size_t total = 0;
  for (size_t c : x.counts) total += std::min(c, round);
  return total;
}

template <typename Exchange>
MuonSizes sizes_of(const ZeroPlan& plan, const std::vector<MuonMatrices::Matrix>& matrices,
                   const std::vector<std::pair<size_t, size_t>>& held, const Exchange& gather, const Exchange& back,
                   size_t round) {
  MuonSizes s;
  s.updates = plan.opt_count;
  for (const MuonMatrices::Matrix& m : matrices) {
    if (m.owner != plan.rank) continue;
    if (!holds_whole(m, held[size_t(plan.rank)])) s.assembly += m.hi - m.lo;
    s.max_elements = std::max(s.max_elements, m.rows * m.cols);
    s.max_side = std::max(s.max_side, std::min(m.rows, m.cols));
  }
  s.send = std::max(gather.counts[size_t(plan.rank)], back.counts[size_t(plan.rank)]);
  s.recv = std::max(round_total(gather, round), round_total(back, round));
  return s;
}

}  // namespace

std::vector<size_t> MuonMatrices::buffer_allocations(const ZeroPlan& plan, const OptimizerConfig& opt,
                                                     const std::vector<std::pair<size_t, size_t>>& tensors,
                                                     const std::vector<TensorShape>& shapes, size_t collective_elements) {
  const auto held = held_ranges(plan);
  const auto matrices = assign(tensors, shapes, held, opt);
  auto [g, b] = pieces_of(matrices, held);
  const MuonSizes s = sizes_of(plan, matrices, held, make_exchange(g, plan.world), make_exchange(b, plan.world),
                               round_elements(collective_elements, plan.world));
  std::vector<size_t> arrays;  // the constructor's, in its order; empty ones allocate nothing
  for (size_t n : {s.updates, s.assembly, s.send, s.recv}) {
    if (n) arrays.push_back(n * sizeof(float));
  }
  if (s.max_elements) {
    arrays.push_back(NewtonSchulz::workspace_elements(s.max_elements, s.max_side) * sizeof(float));
    arrays.push_back(sizeof(double));
  }
  return arrays;
}

size_t MuonMatrices::buffer_bytes(const ZeroPlan& plan, const OptimizerConfig& opt,
                                  const std::vector<std::pair<size_t, size_t>>& tensors,
                                  const std::vector<TensorShape>& shapes, size_t collective_elements) {
  size_t total = 0;
  for (size_t b : buffer_allocations(plan, opt, tensors, shapes, collective_elements)) total += b;
  return total;
}

MuonMatrices::MuonMatrices(const ZeroPlan& plan, const OptimizerConfig& opt, Backend& backend, DataComm& comm,
                           const std::vector<std::pair<size_t, size_t>>& tensors,
                           const std::vector<TensorShape>& shapes, size_t collective_elements)
    : plan_(plan), backend_(backend), stream_(backend.compute_stream()), comm_(comm), held_(held_ranges(plan)) {
  matrices_ = assign(tensors, shapes, held_, opt);
  matrix_of_.assign(tensors.size(), -1);
  for (size_t k = 0; k < matrices_.size(); ++k) matrix_of_[matrices_[k].tensor] = int(k);
  auto [g, b] = pieces_of(matrices_, held_);
  gather_ = make_exchange(std::move(g), plan.world);
  return_ = make_exchange(std::move(b), plan.world);
  round_ = round_elements(collective_elements, plan.world);
  const MuonSizes s = sizes_of(plan, matrices_, held_, gather_, return_, round_);
  assembly_offset_.assign(matrices_.size(), SIZE_MAX);
  size_t at = 0;
  for (size_t k = 0; k < matrices_.size(); ++k) {
    const Matrix& m = matrices_[k];
    if (m.owner != plan.rank || holds_whole(m, held_[size_t(plan.rank)])) continue;
    assembly_offset_[k] = at;
    at += m.hi - m.lo;
  }
  updates_ = DeviceArray<float>(backend, s.updates);
  if (s.assembly) assembly_ = DeviceArray<float>(backend, s.assembly);
  if (s.send) send_ = DeviceArray<float>(backend, s.send);
  if (s.recv) recv_ = DeviceArray<float>(backend, s.recv);
  if (s.max_elements) {
    ns_ = std::make_unique<NewtonSchulz>(backend, opt.ns_method, opt.ns_steps, s.max_elements, s.max_side);
  }
}

size_t MuonMatrices::bytes() const {
  return updates_.bytes() + assembly_.bytes() + send_.bytes() + recv_.bytes() + (ns_ ? ns_->bytes() : 0);
}

float* MuonMatrices::workspace_of(size_t k) {
  if (assembly_offset_[k] != SIZE_MAX) return assembly_.data() + assembly_offset_[k];
  return updates_.data() + (matrices_[k].lo - plan_.opt_begin);
}

template <typename Src, typename Dst>
void MuonMatrices::exchange(const Exchange& x, Src src_of, Dst dst_of) {
  if (x.total() == 0) return;
  const int me = plan_.rank;
  const auto mine = [me](const Piece& p) { return p.to == me || (p.to == kEveryone && p.from != me); };
  for (size_t i = 0; i < x.pieces.size(); ++i) {
    const Piece& p = x.pieces[i];
    if (p.from != me) continue;
    backend_.copy_async(send_.data() + x.offset[i], src_of(p), (p.hi - p.lo) * sizeof(float), stream_);
  }
  const size_t largest = *std::max_element(x.counts.begin(), x.counts.end());
  for (size_t start = 0; start < largest; start += round_) {  // [start, start + round_) of every block
    std::vector<size_t> counts(x.counts.size()), at(x.counts.size(), 0);
    for (size_t r = 0; r < counts.size(); ++r) {
      counts[r] = x.counts[r] > start ? std::min(round_, x.counts[r] - start) : 0;
      if (r > 0) at[r] = at[r - 1] + counts[r - 1];  // where rank r's slice lands in recv_
    }
    // A rank with nothing this round still passes a valid pointer.
    float* send = send_.data() ? send_.data() + std::min(start, send_.size()) : recv_.data();
    comm_.all_gather(send, recv_.data(), counts, DType::kF32, stream_)->wait(stream_);
    for (size_t i = 0; i < x.pieces.size(); ++i) {
      const Piece& p = x.pieces[i];
      if (!mine(p)) continue;
      // The part of the piece in its sender's slice of this round.
      const size_t from = size_t(p.from), lo = std::max(x.offset[i], start);
      const size_t hi = std::min(x.offset[i] + (p.hi - p.lo), start + counts[from]);
      if (hi <= lo) continue;
      backend_.copy_async(dst_of(p) + (lo - x.offset[i]), recv_.data() + at[from] + (lo - start),
                          (hi - lo) * sizeof(float), stream_);
    }
  }
}

void MuonMatrices::orthogonalize() {
  const int me = plan_.rank;
  const size_t base = plan_.opt_begin;
  const auto in_updates = [&](size_t flat) { return updates_.data() + (flat - base); };
  const auto in_matrix = [&](const Piece& p) { return workspace_of(p.matrix) + (p.lo - matrices_[p.matrix].lo); };
  // Assemble the matrices this rank owns but holds only part of: its own part, then the others'.
  for (size_t k = 0; k < matrices_.size(); ++k) {
    if (assembly_offset_[k] == SIZE_MAX) continue;
    const Matrix& m = matrices_[k];
    const size_t a = std::max(m.lo, held_[size_t(me)].first), b = std::min(m.hi, held_[size_t(me)].second);
    if (b > a) backend_.copy_async(workspace_of(k) + (a - m.lo), in_updates(a), (b - a) * sizeof(float), stream_);
  }
  exchange(gather_, [&](const Piece& p) { return in_updates(p.lo); }, in_matrix);
  for (size_t k = 0; k < matrices_.size(); ++k) {
    if (matrices_[k].owner == me) ns_->orthogonalize(workspace_of(k), matrices_[k].rows, matrices_[k].cols);
  }
  // This rank's own part of an assembled matrix goes back into its updates; the rest to the holders.
  for (size_t k = 0; k < matrices_.size(); ++k) {
    if (assembly_offset_[k] == SIZE_MAX) continue;
    const Matrix& m = matrices_[k];
    const size_t a = std::max(m.lo, held_[size_t(me)].first), b = std::min(m.hi, held_[size_t(me)].second);
    if (b > a) backend_.copy_async(in_updates(a), workspace_of(k) + (a - m.lo), (b - a) * sizeof(float), stream_);
  }
  exchange(return_, in_matrix, [&](const Piece& p) { return in_updates(p.lo); });
}

}  // namespace zt
