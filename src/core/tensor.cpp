// Shape arithmetic and checked accessors for TensorView.
#include "tierzero/core/tensor.hpp"

#include "tierzero/core/error.hpp"

namespace tierzero {

const char* device_kind_name(DeviceKind k) {
  return k == DeviceKind::cpu ? "cpu" : "cuda";
}

Shape::Shape(std::initializer_list<int64_t> dims) {
  TZ_CHECK(dims.size() <= kMaxDims, "shape has " + std::to_string(dims.size()) + " dimensions",
           "at most 6 are supported");
  for (int64_t d : dims) {
    TZ_CHECK(d >= 0, "negative dimension " + std::to_string(d) + " in a shape", "");
    dims_[rank_++] = d;
  }
}

size_t Shape::numel() const {
  size_t n = 1;
  for (size_t i = 0; i < rank_; ++i) n *= static_cast<size_t>(dims_[i]);
  return n;
}

std::string Shape::str() const {
  std::string s = "(";
  for (size_t i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(dims_[i]);
  return s + ")";
}

bool Shape::operator==(const Shape& o) const {
  if (rank_ != o.rank_) return false;
  for (size_t i = 0; i < rank_; ++i)
    if (dims_[i] != o.dims_[i]) return false;
  return true;
}

float* TensorView::f32() const {
  TZ_CHECK(dtype == DType::f32, std::string("tensor is ") + dtype_name(dtype) + ", not fp32",
           "convert it first");
  return static_cast<float*>(data);
}

}  // namespace tierzero
