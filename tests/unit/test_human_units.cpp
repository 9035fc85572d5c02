// The numbers the trainer's log lines print: one suffix each (a count of 4.33e9 once printed
// "4.33BB"), decimal units for bytes.
#include <gtest/gtest.h>

#include "core/human_units.h"

namespace zt {

TEST(HumanUnits, CountsCarryOneSuffix) {
  EXPECT_EQ(human_count(999), "999");
  EXPECT_EQ(human_count(842496), "842.5k");
  EXPECT_EQ(human_count(124439808), "124.44M");
  EXPECT_EQ(human_count(4.33e9), "4.33B");
  EXPECT_EQ(human_count(1.76e11), "176.00B");
}

TEST(HumanUnits, BytesInDecimalUnits) {
  EXPECT_EQ(human_bytes(0), "0 B");
  EXPECT_EQ(human_bytes(999), "999 B");
  EXPECT_EQ(human_bytes(13631488), "13.63 MB");
  EXPECT_EQ(human_bytes(4.33e9), "4.33 GB");
  EXPECT_EQ(human_bytes(2.5e15), "2.50 PB");
  EXPECT_EQ(human_bytes(3e18), "3000.00 PB");  // the largest unit, never past the table
}

}  // namespace zt
