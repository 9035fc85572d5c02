// Where each rank's block starts when the blocks lie in rank order in one buffer: the
// displacements of MPI's v-collectives, shared by the host communicators.
#pragma once

#include <cstddef>
#include <vector>

namespace zt {

/// Element offsets: block r starts at counts[0] + ... + counts[r-1].
inline std::vector<size_t> block_offsets(const std::vector<size_t>& counts) {
  std::vector<size_t> offsets(counts.size());
  size_t offset = 0;
  for (size_t r = 0; r < counts.size(); ++r) {
    offsets[r] = offset;
    offset += counts[r];
  }
  return offsets;
}

}  // namespace zt
