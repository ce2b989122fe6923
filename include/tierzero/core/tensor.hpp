// TensorView: a non-owning view of a buffer (pointer, shape, dtype, where it lives).
// Views are what layers pass to each other; ownership stays with the allocator that made the bytes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "tierzero/core/dtype.hpp"

namespace tierzero {

enum class DeviceKind : uint8_t { cpu, cuda };
const char* device_kind_name(DeviceKind k);

constexpr size_t kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  size_t rank() const { return rank_; }
  int64_t operator[](size_t i) const { return dims_[i]; }
  size_t numel() const;
  std::string str() const;  // "(3, 768, 768)"
  bool operator==(const Shape& o) const;

 private:
  std::array<int64_t, kMaxDims> dims_{};
  size_t rank_ = 0;
};

struct TensorView {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::f32;
  DeviceKind device = DeviceKind::cpu;

  size_t numel() const { return shape.numel(); }
  size_t bytes() const { return numel() * dtype_size(dtype); }
  float* f32() const;  // throws Error unless dtype is fp32
};

}  // namespace tierzero
