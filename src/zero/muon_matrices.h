// Muon under ZeRO: each hidden weight matrix is orthogonalised whole, by one rank, whatever the
// flat partitions cut it into. ZeRO flattens and partitions the parameters, and Newton-Schulz
// needs a matrix's shape and every one of its elements: DeepSpeed's Muon ran SGD instead where
// it saw only flat pieces (its issue #8441, PR #8438). Here the model's layout says which tensors
// are hidden matrices (TensorShape) and where each lies in the flat buffer.
//
// Every matrix gets an owner, the same on every rank: the ranks' Newton-Schulz work is balanced by
// its cost (NewtonSchulz::cost), a matrix staying with the rank that holds most of it where the
// balance allows, so that little moves. A step then runs, on the compute stream and the data
// communicator:
//   gather   each rank sends the pieces it holds of matrices owned elsewhere (the momentum
//            updates, fp32); the owner assembles each matrix whole
//   orthogonalise  the owner runs Newton-Schulz on each of its matrices
//   return   the owner sends each piece back to the ranks that hold it
// Only pieces of matrices cross ranks, never the model: a matrix that lies inside its owner's
// range is orthogonalised where it is. At stage 0 every rank holds everything, so nothing is
// gathered and the owners' results go to every rank. The exchanges are all-gathers of each rank's
// outgoing pieces (every DataComm has one); past 2 ranks a rank also receives pieces meant for
// others, which it skips.
#pragma once

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/device_array.h"
#include "comm/data_comm.h"
#include "config/ds_config.h"
#include "model/param_layout.h"
#include "optim/newton_schulz.h"
#include "zero/zero_plan.h"

namespace zt {

class MuonMatrices {
 public:
  struct Matrix {
    size_t tensor = 0;      ///< index in the layout's tensors
    size_t lo = 0, hi = 0;  ///< flat range
    size_t rows = 0, cols = 0;
    int owner = 0;
  };
  /// A piece of a matrix that moves from one rank to another in an exchange.
  struct Piece {
    size_t matrix = 0;  ///< index in matrices()
    size_t lo = 0, hi = 0;
    int from = 0, to = 0;  ///< to: kEveryone for a result every other rank takes (stage 0)
  };
  static constexpr int kEveryone = -1;

  /// The hidden matrices of a layout, in flat order, with their owners for a world of `world`
  /// ranks holding `held[r]` each (flat ranges). Throws UsageError when the layout has none.
  static std::vector<Matrix> assign(const std::vector<std::pair<size_t, size_t>>& tensors,
                                    const std::vector<TensorShape>& shapes,
                                    const std::vector<std::pair<size_t, size_t>>& held, const OptimizerConfig& opt);
  /// Each rank's optimizer range under `plan`'s stage (stage 0: everything, on every rank).
  static std::vector<std::pair<size_t, size_t>> held_ranges(const ZeroPlan& plan);

  /// The device arrays a MuonMatrices for this plan and layout allocates on plan.rank, in bytes
  /// (zero_estimate takes the rank that allocates most; the GPU view rounds each), and their sum.
  static std::vector<size_t> buffer_allocations(const ZeroPlan& plan, const OptimizerConfig& opt,
                                                const std::vector<std::pair<size_t, size_t>>& tensors,
                                                const std::vector<TensorShape>& shapes, size_t collective_elements);
  static size_t buffer_bytes(const ZeroPlan& plan, const OptimizerConfig& opt,
                             const std::vector<std::pair<size_t, size_t>>& tensors,
                             const std::vector<TensorShape>& shapes, size_t collective_elements);

  /// `collective_elements`: the most elements one all-gather of an exchange moves (the engine's
  /// allgather_bucket_size, within DataComm::max_collective_elements): larger exchanges run in rounds.
  MuonMatrices(const ZeroPlan& plan, const OptimizerConfig& opt, Backend& backend, DataComm& comm,
               const std::vector<std::pair<size_t, size_t>>& tensors, const std::vector<TensorShape>& shapes,
               size_t collective_elements);

  /// The updates over this rank's optimizer range, fp32 on the device, element i for flat
  /// opt_begin + i: the momentum pass writes the matrices' here, orthogonalize() replaces them.
  float* updates() { return updates_.data(); }
  /// Orthogonalises every matrix's update in updates(), the exchanges included. Collective.
  void orthogonalize();
  /// Whether tensor t is a hidden matrix (Muon steps it; AdamW the others).
  bool is_matrix(size_t t) const { return t < matrix_of_.size() && matrix_of_[t] >= 0; }
  const std::vector<Matrix>& matrices() const { return matrices_; }
  size_t bytes() const;

 private:
  /// Layout of one exchange: the pieces in sender order, and where each sits in its sender's block.
  struct Exchange {
    std::vector<Piece> pieces;
    std::vector<size_t> offset;  ///< per piece, in its sender's block
    std::vector<size_t> counts;  ///< per rank: elements it sends
    size_t total() const;
  };
  static Exchange make_exchange(std::vector<Piece> pieces, int world);
  /// Sends every rank's block of `x` (packed from `src_of(piece)`), delivers the pieces meant for
  /// this rank to `dst_of(piece)`: all-gathers of at most round_ elements a rank, as many as the
  /// largest block needs, each round's pieces copied out of recv_ before the next.
  template <typename Src, typename Dst>
  void exchange(const Exchange& x, Src src_of, Dst dst_of);
  /// Where matrix k is orthogonalised on its owner: in place in updates(), or its assembly.
  float* workspace_of(size_t k);

  const ZeroPlan& plan_;
  Backend& backend_;
  Stream& stream_;
  DataComm& comm_;
  std::vector<Matrix> matrices_;
  std::vector<int> matrix_of_;  // per tensor: index in matrices_, or -1
  std::vector<std::pair<size_t, size_t>> held_;
  Exchange gather_, return_;
  std::vector<size_t> assembly_offset_;  // per matrix this rank owns but does not hold whole; else SIZE_MAX
  size_t round_ = 0;  // elements a rank contributes to one all-gather of an exchange
  DeviceArray<float> updates_, assembly_, send_, recv_;
  std::unique_ptr<NewtonSchulz> ns_;
};

}  // namespace zt
