/// \file
/// The elementwise passes of fused layers: bias + activation over rows, the ReLU mask of a
/// backward pass, column sums for bias gradients. Each one pass over memory, vectorised.
#pragma once

#include <cstdint>

#include <strata/config.hpp>                // STRATA_RESTRICT
#include <strata/kernels/cpu/blocked.hpp>  // for_each_blocked

namespace strata::kernels::cpu {

/// dst[r, c] = act(src[r, c] + bias[c]) over `rows` rows of `cols`; bias may be null.
/// src and dst may be the same buffer only through bias_act_inplace.
template <class T>
void bias_act_rows(std::int64_t rows, std::int64_t cols, const T* STRATA_RESTRICT src, std::int64_t src_stride,
                   const T* STRATA_RESTRICT bias, bool relu, T* STRATA_RESTRICT dst, std::int64_t dst_stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* STRATA_RESTRICT s = src + r * src_stride;
    T* STRATA_RESTRICT d = dst + r * dst_stride;
    if (bias && relu)
      for_each_blocked(cols, [&](std::int64_t c) {
        const T v = s[c] + bias[c];
        d[c] = v > T(0) ? v : T(0);
      });
    else if (bias)
      for_each_blocked(cols, [&](std::int64_t c) { d[c] = s[c] + bias[c]; });
    else if (relu)
      for_each_blocked(cols, [&](std::int64_t c) { d[c] = s[c] > T(0) ? s[c] : T(0); });
    else
      for_each_blocked(cols, [&](std::int64_t c) { d[c] = s[c]; });
  }
}

/// dst[r, c] = act(src[r, c] + bias[r]) (one bias per row, as per channel in NCHW); bias may be null.
template <class T>
void row_bias_act_rows(std::int64_t rows, std::int64_t cols, const T* STRATA_RESTRICT src, std::int64_t src_stride,
                       const T* STRATA_RESTRICT bias, bool relu, T* STRATA_RESTRICT dst, std::int64_t dst_stride) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* STRATA_RESTRICT s = src + r * src_stride;
    T* STRATA_RESTRICT d = dst + r * dst_stride;
    const T b = bias ? bias[r] : T(0);
    if (relu)
      for_each_blocked(cols, [&](std::int64_t c) {
        const T v = s[c] + b;
        d[c] = v > T(0) ? v : T(0);
      });
    else
      for_each_blocked(cols, [&](std::int64_t c) { d[c] = s[c] + b; });
  }
}

/// y[r, c] = act(y[r, c] + bias[r]) in place (one bias per row); bias may be null.
template <class T>
void row_bias_act_inplace(std::int64_t rows, std::int64_t cols, T* STRATA_RESTRICT y, const T* STRATA_RESTRICT bias,
                          bool relu) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* STRATA_RESTRICT d = y + r * cols;
    const T b = bias ? bias[r] : T(0);
    if (relu)
      for_each_blocked(cols, [&](std::int64_t c) {
        const T v = d[c] + b;
        d[c] = v > T(0) ? v : T(0);
      });
    else
      for_each_blocked(cols, [&](std::int64_t c) { d[c] += b; });
  }
}

/// y[r, c] = act(y[r, c] + bias[c]) in place.
template <class T>
void bias_act_inplace(std::int64_t rows, std::int64_t cols, T* STRATA_RESTRICT y, const T* STRATA_RESTRICT bias,
                      bool relu) {
  for (std::int64_t r = 0; r < rows; ++r) {
    T* STRATA_RESTRICT d = y + r * cols;
    if (bias && relu)
      for_each_blocked(cols, [&](std::int64_t c) {
        const T v = d[c] + bias[c];
        d[c] = v > T(0) ? v : T(0);
      });
    else if (bias)
      for_each_blocked(cols, [&](std::int64_t c) { d[c] += bias[c]; });
    else if (relu)
      for_each_blocked(cols, [&](std::int64_t c) { d[c] = d[c] > T(0) ? d[c] : T(0); });
  }
}

/// g[i] = y[i] > 0 ? g[i] : 0 (the ReLU part of a fused backward), in place on g.
template <class T>
void relu_mask_inplace(std::int64_t n, const T* STRATA_RESTRICT y, T* STRATA_RESTRICT g) {
  for_each_blocked(n, [&](std::int64_t i) {
    const T gi = g[i];  // loaded unconditionally: a select, not a branch, so it vectorizes
    g[i] = y[i] > T(0) ? gi : T(0);
  });
}

/// out[i] = y[i] > 0 ? g[i] : 0, or out[i] += that when `accumulate`.
template <class T>
void relu_backward(std::int64_t n, const T* STRATA_RESTRICT y, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT out,
                   bool accumulate) {
  if (accumulate)
    for_each_blocked(n, [&](std::int64_t i) {
      const T gi = g[i];  // loaded unconditionally: a select, not a branch, so it vectorizes
      out[i] += y[i] > T(0) ? gi : T(0);
    });
  else
    for_each_blocked(n, [&](std::int64_t i) {
      const T gi = g[i];
      out[i] = y[i] > T(0) ? gi : T(0);
    });
}

/// out[c] (+)= sum over rows of g[r, c].
template <class T>
void column_sums(std::int64_t rows, std::int64_t cols, const T* STRATA_RESTRICT g, T* STRATA_RESTRICT out,
                 bool accumulate) {
  if (!accumulate)
    for_each_blocked(cols, [&](std::int64_t c) { out[c] = T(0); });
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* STRATA_RESTRICT row = g + r * cols;
    for_each_blocked(cols, [&](std::int64_t c) { out[c] += row[c]; });
  }
}

/// out[r] (+)= sum of row r of g [rows, cols] (row stride `stride`). Eight partial sums per
/// row, combined in a fixed order: vectorised, and the same result on every run.
template <class T>
void row_sums(std::int64_t rows, std::int64_t cols, const T* STRATA_RESTRICT g, std::int64_t stride,
              T* STRATA_RESTRICT out, bool accumulate) {
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* STRATA_RESTRICT row = g + r * stride;
    T lanes[kBlock] = {};
    const std::int64_t full = cols - cols % kBlock;
    for (std::int64_t c = 0; c < full; c += kBlock)
      for (int j = 0; j < kBlock; ++j) lanes[j] += row[c + j];
    T acc = 0;
    for (int j = 0; j < kBlock; ++j) acc += lanes[j];
    for (std::int64_t c = full; c < cols; ++c) acc += row[c];
    out[r] = accumulate ? out[r] + acc : acc;
  }
}

/// The output-gradient pass of a convolution, fused: for each image b and channel r,
/// gt[r, b*cols + c] = mask(g[b, r, c]) where mask zeroes entries whose output y is not
/// positive (ReLU, when y is given) or passes them, and bias_sum[r] receives the row sums.
template <class T>
void conv_output_grad(std::int64_t images, std::int64_t rows, std::int64_t cols, const T* STRATA_RESTRICT g,
                      const T* STRATA_RESTRICT y, T* STRATA_RESTRICT gt, T* STRATA_RESTRICT bias_sum) {
  const std::int64_t ld = images * cols;
  for (std::int64_t r = 0; r < rows; ++r) bias_sum[r] = T(0);
  for (std::int64_t b = 0; b < images; ++b)
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* STRATA_RESTRICT src = g + (b * rows + r) * cols;
      const T* STRATA_RESTRICT out = y ? y + (b * rows + r) * cols : nullptr;
      T* STRATA_RESTRICT dst = gt + r * ld + b * cols;
      T lanes[kBlock] = {};
      const std::int64_t full = cols - cols % kBlock;
      if (out) {
        for (std::int64_t c = 0; c < full; c += kBlock)
          for (int j = 0; j < kBlock; ++j) {
            const T sv = src[c + j];  // loaded unconditionally: a select, not a branch
            const T v = out[c + j] > T(0) ? sv : T(0);
            dst[c + j] = v;
            lanes[j] += v;
          }
      } else {
        for (std::int64_t c = 0; c < full; c += kBlock)
          for (int j = 0; j < kBlock; ++j) {
            dst[c + j] = src[c + j];
            lanes[j] += src[c + j];
          }
      }
      T acc = 0;
      for (int j = 0; j < kBlock; ++j) acc += lanes[j];
      for (std::int64_t c = full; c < cols; ++c) {
        const T v = (!out || out[c] > T(0)) ? src[c] : T(0);
        dst[c] = v;
        acc += v;
      }
      bias_sum[r] += acc;
    }
}

/// out (+)= src, elementwise.
template <class T>
void copy_or_add(std::int64_t n, const T* STRATA_RESTRICT src, T* STRATA_RESTRICT out, bool accumulate) {
  if (accumulate)
    for_each_blocked(n, [&](std::int64_t i) { out[i] += src[i]; });
  else
    for_each_blocked(n, [&](std::int64_t i) { out[i] = src[i]; });
}

}  // namespace strata::kernels::cpu
