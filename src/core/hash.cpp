#include "core/hash.h"

namespace zt {

uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;  // 2^64 / golden ratio: splitmix64's state increment
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace zt
