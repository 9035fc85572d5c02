#include "zero/adafactor_factors.h"

#include "core/error.h"

namespace zt {

std::pair<size_t, size_t> AdafactorFactors::extent(const std::vector<TensorShape>& shapes) {
  size_t rows = 0, cols = 0;
  for (const TensorShape& s : shapes) {
    if (!s.matrix()) continue;
    rows += s.rows;
    cols += s.cols;
  }
  return {rows, cols};
}

std::vector<size_t> AdafactorFactors::device_allocations(const std::vector<TensorShape>& shapes) {
  const auto [rows, cols] = extent(shapes);  // row_, col_ (the state); sums_, scaled_row_ (buffers)
  return {rows * sizeof(float), cols * sizeof(float), (rows + cols) * sizeof(float), rows * sizeof(float)};
}

size_t AdafactorFactors::state_bytes(const std::vector<TensorShape>& shapes) {
  const std::vector<size_t> a = device_allocations(shapes);
  return a[0] + a[1];
}

size_t AdafactorFactors::buffer_bytes(const std::vector<TensorShape>& shapes) {
  const std::vector<size_t> a = device_allocations(shapes);
  return a[2] + a[3];
}

size_t AdafactorFactors::host_copy_bytes(const std::vector<TensorShape>& shapes) {
  const auto [rows, cols] = extent(shapes);
  return 2 * (rows + cols) * sizeof(float);  // the sums, the scaled rows and the columns
}

AdafactorFactors::AdafactorFactors(Backend& backend, const std::vector<TensorShape>& shapes, bool host_copies)
    : backend_(backend), ops_(backend.optimizer_ops()), shapes_(shapes) {
  for (const TensorShape& s : shapes_) {
    if (!s.matrix()) {
      offsets_.emplace_back(kNone, kNone);
      continue;
    }
    offsets_.emplace_back(rows_, cols_);
    rows_ += s.rows;
    cols_ += s.cols;
  }
  row_ = DeviceArray<float>(backend, rows_);
  col_ = DeviceArray<float>(backend, cols_);
  sums_ = DeviceArray<float>(backend, rows_ + cols_);
  scaled_row_ = DeviceArray<float>(backend, rows_);
  if (host_copies) {
    host_sums_ = DeviceArray<float>(backend, rows_ + cols_, Pool::kHost);
    host_scaled_row_ = DeviceArray<float>(backend, rows_, Pool::kHost);
    host_col_ = DeviceArray<float>(backend, cols_, Pool::kHost);
  }
  zero();
}

void AdafactorFactors::zero() {
  if (rows_ > 0) ops_.zero(row_.data(), DType::kF32, rows_);
  if (cols_ > 0) ops_.zero(col_.data(), DType::kF32, cols_);
}

void AdafactorFactors::update(const OptimizerStepArgs& args) {
  for (size_t t = 0; t < shapes_.size(); ++t) {
    if (!factored(t)) continue;
    const auto [r, c] = offsets_[t];
    ops_.adafactor_factors(args, row_.data() + r, col_.data() + c, row_sums(sums_.data(), t),
                           col_sums(sums_.data(), t), shapes_[t].rows, shapes_[t].cols, scaled_row_.data() + r);
  }
  if (host_sums_.size() == 0 || rows_ == 0) return;
  backend_.copy_to_host(host_scaled_row_.data(), scaled_row_.data(), scaled_row_.bytes());
  backend_.copy_to_host(host_col_.data(), col_.data(), col_.bytes());
}

AdafactorMoment AdafactorFactors::moment(size_t t, size_t first) {
  return moment_in(scaled_row_.data(), col_.data(), t, first);
}

AdafactorMoment AdafactorFactors::host_moment(size_t t, size_t first) {
  ZT_CHECK(host_scaled_row_.size() == rows_, "Adafactor's host copies asked of factors built without them");
  return moment_in(host_scaled_row_.data(), host_col_.data(), t, first);
}

AdafactorMoment AdafactorFactors::moment_in(const float* scaled_row, const float* col, size_t t, size_t first) const {
  AdafactorMoment m;
  m.scaled_row = scaled_row + offsets_[t].first;
  m.col = col + offsets_[t].second;
  m.first = first;
  m.cols = shapes_[t].cols;
  return m;
}

void AdafactorFactors::read(float* rows, float* cols) {
  if (rows_ == 0) return;
  backend_.copy_to_host(rows, row_.data(), row_.bytes());
  backend_.copy_to_host(cols, col_.data(), col_.bytes());
}

void AdafactorFactors::load(const float* rows, const float* cols) {
  if (rows_ == 0) return;
  backend_.copy_from_host(row_.data(), rows, row_.bytes());
  backend_.copy_from_host(col_.data(), cols, col_.bytes());
}

}  // namespace zt
