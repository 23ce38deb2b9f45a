/// \file
/// Batch normalisation over [images, channels, plane] (plane = H * W, or 1 for [N, C]), in
/// the pieces a synchronised batch norm needs: per-channel sums that can be added across
/// replicas before they become statistics, and the passes that use them, with ResNet's
/// "+ shortcut, ReLU" fused into the output pass and the ReLU's mask into the gradient's.
///
/// The sums run over each plane in kLanes independent accumulators of T (vectorised), then
/// add to double across planes; the moments are taken about a shift (the channel's first
/// value), so that E[x²] - E[x]² does not cancel a large mean's digits in float32.
#pragma once

#include <cstdint>
#include <type_traits>  // std::is_same_v
#include <vector>

#include <strata/kernels/cpu/batch_norm_avx512.hpp>
#include <strata/kernels/cpu/cpu_features.hpp>  // has_avx512f

namespace strata::kernels::cpu {

namespace detail {
inline constexpr int kLanes = 8;
}  // namespace detail

/// sum[c] += Σ x, sumsq[c] += Σ x² over the images and the plane of channel c (float on a
/// CPU with AVX-512: kernels/cpu/batch_norm_avx512.hpp, in double lanes).
template <class T>
void channel_moments(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, double* sum,
                     double* sumsq) {
#ifdef STRATA_BATCH_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) return batch_norm_avx512::channel_moments(images, channels, plane, x, sum, sumsq);
#endif
  using detail::kLanes;
  for (std::int64_t c = 0; c < channels && images > 0 && plane > 0; ++c) {
    const T k = x[c * plane];  // the shift
    double s = 0, q = 0;
    for (std::int64_t n = 0; n < images; ++n) {
      const T* p = x + (n * channels + c) * plane;
      T ls[kLanes] = {}, lq[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= plane; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          const T v = p[i + j] - k;
          ls[j] += v;
          lq[j] += v * v;
        }
      for (int j = 0; j < kLanes; ++j) {
        s += static_cast<double>(ls[j]);
        q += static_cast<double>(lq[j]);
      }
      for (; i < plane; ++i) {
        const double v = static_cast<double>(p[i] - k);
        s += v;
        q += v * v;
      }
    }
    // Back from the shifted sums: Σx = Σv + n k, Σx² = Σv² + 2k Σv + n k².
    const double kk = static_cast<double>(k), count = static_cast<double>(images * plane);
    sum[c] += s + count * kk;
    sumsq[c] += q + 2 * kk * s + count * kk * kk;
  }
}

/// y = act((x - mean[c]) * rstd[c] * w[c] + b[c] + r) with act ReLU or none (w, b and the
/// residual r may be null).
template <class T>
void batch_norm_apply(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                      const T* rstd, const T* w, const T* b, const T* r, bool relu, T* y) {
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const T scale = rstd[c] * (w ? w[c] : T(1));
      const T shift = (b ? b[c] : T(0)) - mean[c] * scale;
      const T* xi = x + at;
      T* yi = y + at;
      if (r == nullptr && !relu) {
        for (std::int64_t i = 0; i < plane; ++i) yi[i] = xi[i] * scale + shift;
      } else if (r == nullptr) {
        for (std::int64_t i = 0; i < plane; ++i) {
          const T v = xi[i] * scale + shift;
          yi[i] = v > T(0) ? v : T(0);
        }
      } else {
        const T* ri = r + at;
        for (std::int64_t i = 0; i < plane; ++i) {
          const T v = xi[i] * scale + shift + ri[i];
          yi[i] = relu && !(v > T(0)) ? T(0) : v;
        }
      }
    }
}

/// sum_dy[c] += Σ dy, sum_dy_h[c] += Σ dy * h with h = (x - mean) * rstd. With `relu_out` (the
/// output of a fused ReLU) dy is first masked in place where the output is not positive
/// (float on a CPU with AVX-512: kernels/cpu/batch_norm_avx512.hpp, in double lanes).
template <class T>
void batch_norm_grad_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                          const T* rstd, T* dy, const T* relu_out, double* sum_dy, double* sum_dy_h) {
#ifdef STRATA_BATCH_NORM_AVX512
  if constexpr (std::is_same_v<T, float>)
    if (has_avx512f()) {
      thread_local std::vector<double> lanes;  // (grows to the widest layer's, then stays)
      if (lanes.size() < static_cast<std::size_t>(channels * 32)) lanes.resize(static_cast<std::size_t>(channels * 32));
      return batch_norm_avx512::grad_sums(images, channels, plane, x, mean, rstd, dy, relu_out, sum_dy, sum_dy_h,
                                          lanes.data());
    }
#endif
  using detail::kLanes;
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const T m = mean[c];
      const T* xi = x + at;
      T* g = dy + at;
      if (relu_out != nullptr) {
        const T* yi = relu_out + at;
        for (std::int64_t i = 0; i < plane; ++i) {  // load, then select: a conditional load stays a branch
          const T v = g[i];
          g[i] = yi[i] > T(0) ? v : T(0);
        }
      }
      T ls[kLanes] = {}, lh[kLanes] = {};
      std::int64_t i = 0;
      for (; i + kLanes <= plane; i += kLanes)
        for (int j = 0; j < kLanes; ++j) {
          ls[j] += g[i + j];
          lh[j] += g[i + j] * (xi[i + j] - m);
        }
      double s = 0, sh = 0;
      for (int j = 0; j < kLanes; ++j) {
        s += static_cast<double>(ls[j]);
        sh += static_cast<double>(lh[j]);
      }
      for (; i < plane; ++i) {
        s += static_cast<double>(g[i]);
        sh += static_cast<double>(g[i] * (xi[i] - m));
      }
      sum_dy[c] += s;
      sum_dy_h[c] += sh * static_cast<double>(rstd[c]);
    }
}

/// dx (+)= w[c] * rstd[c] * (dy - mean_dy[c] - h * mean_dy_h[c]): the training-mode gradient,
/// the means over every row the statistics came from. With mean_dy and mean_dy_h null it is
/// the evaluation-mode gradient w * rstd * dy (fixed statistics).
template <class T>
void batch_norm_input_grad(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                           const T* rstd, const T* w, const T* dy, const T* mean_dy, const T* mean_dy_h, T* dx,
                           bool accumulate) {
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const T m = mean[c], r = rstd[c], k = r * (w ? w[c] : T(1));
      const T md = mean_dy ? mean_dy[c] : T(0), rmh = r * (mean_dy_h ? mean_dy_h[c] : T(0));
      const T* xi = x + at;
      const T* gi = dy + at;
      T* di = dx + at;
      if (accumulate)
        for (std::int64_t i = 0; i < plane; ++i) di[i] += k * (gi[i] - md - (xi[i] - m) * rmh);
      else
        for (std::int64_t i = 0; i < plane; ++i) di[i] = k * (gi[i] - md - (xi[i] - m) * rmh);
    }
}

}  // namespace strata::kernels::cpu
