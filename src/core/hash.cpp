#include "core/hash.h"

namespace zt {

uint64_t mix64(uint64_t x) {
  x += kSplitmix64Gamma;  // the generator's step before its output function
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace zt
