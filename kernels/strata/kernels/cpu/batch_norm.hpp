/// \file
/// Batch normalisation over [images, channels, plane] (plane = H * W, or 1 for [N, C]), in
/// the pieces a synchronised batch norm needs: per-channel sums that can be added across
/// replicas before they become statistics, and the passes that use them.
#pragma once

#include <cstdint>

namespace strata::kernels::cpu {

/// sum[c] += Σ x, sumsq[c] += Σ x² over the images and the plane of channel c (in double, so
/// that the variance E[x²] - E[x]² keeps its digits in float32).
template <class T>
void channel_moments(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, double* sum,
                     double* sumsq) {
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const T* p = x + (n * channels + c) * plane;
      double s = 0, q = 0;
      for (std::int64_t i = 0; i < plane; ++i) {
        const double v = static_cast<double>(p[i]);
        s += v;
        q += v * v;
      }
      sum[c] += s;
      sumsq[c] += q;
    }
}

/// y = (x - mean[c]) * rstd[c] * w[c] + b[c] (w, b may be null).
template <class T>
void batch_norm_apply(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                      const T* rstd, const T* w, const T* b, T* y) {
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const T scale = rstd[c] * (w ? w[c] : T(1));
      const T shift = (b ? b[c] : T(0)) - mean[c] * scale;
      for (std::int64_t i = 0; i < plane; ++i) y[at + i] = x[at + i] * scale + shift;
    }
}

/// sum_dy[c] += Σ dy, sum_dy_h[c] += Σ dy * h with h = (x - mean) * rstd.
template <class T>
void batch_norm_grad_sums(std::int64_t images, std::int64_t channels, std::int64_t plane, const T* x, const T* mean,
                          const T* rstd, const T* dy, double* sum_dy, double* sum_dy_h) {
  for (std::int64_t n = 0; n < images; ++n)
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t at = (n * channels + c) * plane;
      const T m = mean[c], r = rstd[c];
      double s = 0, sh = 0;
      for (std::int64_t i = 0; i < plane; ++i) {
        const T g = dy[at + i];
        s += static_cast<double>(g);
        sh += static_cast<double>(g * (x[at + i] - m) * r);
      }
      sum_dy[c] += s;
      sum_dy_h[c] += sh;
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
      const T md = mean_dy ? mean_dy[c] : T(0), mh = mean_dy_h ? mean_dy_h[c] : T(0);
      for (std::int64_t i = 0; i < plane; ++i) {
        const T v = k * (dy[at + i] - md - (x[at + i] - m) * r * mh);
        dx[at + i] = accumulate ? dx[at + i] + v : v;
      }
    }
}

}  // namespace strata::kernels::cpu
