/// \file
/// WireCompressor: a float32 bucket's all-reduce with 16-bit elements on the wire
/// (Compression::fp16 / bf16, multi-process collectives only). Each partial sum is added in
/// float32 and rounded back, so the bytes halve and the sum stays within the bound the
/// Compression enum states.
#pragma once

#include <cstddef>
#include <vector>

#include <strata/collective/capabilities.hpp>
#include <strata/reducer/options.hpp>
#include <strata/support/check.hpp>
#include <strata/tensor/half.hpp>
#include <strata/tensor/tensor.hpp>

namespace strata::detail {

template <class C>
class WireCompressor {
 public:
  WireCompressor() = default;
  /// A 16-bit copy for each float32 bucket among `counts`/`dtypes`, none where `kind` is none.
  WireCompressor(Compression kind, const std::vector<std::size_t>& counts, const std::vector<DType>& dtypes) : kind_(kind) {
    if (kind_ == Compression::none) return;
    STRATA_CHECK(collective::WireCompression<C>, "gradient compression applies to multi-process collectives; ", C::name,
                 " replicas share memory");
    for (std::size_t b = 0; b < counts.size(); ++b)
      wire_.push_back(dtypes[b] == DType::f32 ? Tensor::empty(Shape{static_cast<std::int64_t>(counts[b])},
                                                               kind_ == Compression::fp16 ? DType::f16 : DType::bf16)
                                               : Tensor());
  }
  bool active() const noexcept { return kind_ != Compression::none; }

  /// Bucket b's sum (`count` float32 elements at `g`) through `comm` with 16-bit elements on
  /// the wire; false, doing nothing, where bucket b travels as it is.
  bool allreduce(C& comm, std::size_t b, void* g, std::size_t count) {
    if constexpr (collective::WireCompression<C>) {
      if (b >= wire_.size() || !wire_[b].defined()) return false;
      if (kind_ == Compression::fp16)
        reduce_16bit<Half>(comm, static_cast<float*>(g), count, wire_[b]);
      else
        reduce_16bit<BFloat16>(comm, static_cast<float*>(g), count, wire_[b]);
      return true;
    } else {
      (void)comm, (void)b, (void)g, (void)count;
      return false;
    }
  }

 private:
  template <class S>
  static void reduce_16bit(C& comm, float* g, std::size_t count, Tensor& wire) {
    S* w = static_cast<S*>(wire.raw_data());
    for (std::size_t i = 0; i < count; ++i) w[i] = S(g[i]);
    comm.allreduce_sum16_raw(w, count, wire.dtype());
    for (std::size_t i = 0; i < count; ++i) g[i] = static_cast<float>(w[i]);
  }

  Compression kind_ = Compression::none;
  std::vector<Tensor> wire_;  // per bucket: the 16-bit copy it travels as (undefined: it travels as it is)
};

}  // namespace strata::detail
