/// \file
/// Differentiable 2-D convolution (NCHW, optional fused bias and ReLU): on the CPU by im2col and
/// GEMMs over chunks of the batch, or, for 3x3 ones at stride 1, by Winograd's F(2x2, 3x3)
/// (kernels/cpu/winograd.hpp). Pooling is in ops/pool.hpp
/// (included here: the layers that follow a convolution).
#pragma once

#include <algorithm>  // std::clamp, std::min
#include <cstdint>

#include <strata/kernels/cpu/conv.hpp>  // im2col, col2im
#include <strata/kernels/cpu/winograd.hpp>
#include <strata/ops/linalg.hpp>        // Activation, ops::detail::gemm
#include <strata/ops/pool.hpp>          // max_pool2d, avg_pool2d
#include <strata/tensor/device_kernels.hpp>  // the device path

namespace strata {

namespace ops::detail {

inline kernels::cpu::ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, std::int64_t stride, std::int64_t pad) {
  return {x.dim(0), x.dim(1), x.dim(2), x.dim(3), w.dim(2), w.dim(3), stride, pad};
}

/// Whether a convolution with `plane` output pixels per image runs one GEMM per image (reading
/// and writing NCHW directly) rather than one GEMM per chunk plus a permute. Measured on
/// OpenBLAS: per-image wins from a few hundred pixels up (conv 5x5 on 28x28), loses at 8x8.
inline bool per_image_gemm(std::int64_t plane) { return plane >= 256; }

/// How many images one chunk of the column matrix holds: the chunk stays within 1 MiB, half of
/// a 2 MiB L2, so im2col writes it, the GEMMs read it and col2im drains it without going to
/// memory. Measured on the CNN's 5x5 convolutions: 4 images of 12x12x32 (800 KiB) run the
/// forward pass 19 % and the backward pass 9 % faster than one batch-wide matrix (13 MiB),
/// which also no longer lives from forward to backward.
inline std::int64_t conv_chunk_images(const kernels::cpu::ConvGeometry& g, std::size_t elem_size) {
  constexpr std::int64_t kChunkBytes = 1 << 20;
  const std::int64_t per_image = g.rows() * g.oh() * g.ow() * static_cast<std::int64_t>(elem_size);
  return std::clamp<std::int64_t>(kChunkBytes / std::max<std::int64_t>(per_image, 1), 1, std::max<std::int64_t>(g.n, 1));
}

/// Whether a convolution keeps its forward pass's column matrix for the backward pass: a 1x1
/// one at a stride above 1 without padding (a ResNet's downsampling shortcut). Its columns
/// are a subsample of x, a quarter of it at stride 2, which the backward pass would otherwise
/// gather again from x (by then mostly out of cache: a strided read of the whole input for a
/// few FLOPs a value). The whole batch's columns are built once and saved.
inline bool keeps_columns(const kernels::cpu::ConvGeometry& g) {
  return g.kh == 1 && g.kw == 1 && g.pad == 0 && g.stride > 1;
}

/// Whether a CPU convolution goes by Winograd's F(2x2, 3x3), forward and backward: 3x3, stride
/// 1, 16 channels or more in and out (kernels/cpu/winograd.hpp; STRATA_CONV=im2col turns it off).
/// Its 16 GEMMs run in the thread's precision (host_gemm), as the direct convolution's do.
inline bool runs_winograd(const kernels::cpu::ConvGeometry& g, std::int64_t out_channels) {
  return kernels::cpu::winograd::applies(g, out_channels) && kernels::cpu::winograd::enabled();
}

/// y (+)= act(conv(x, w) + b) by Winograd's F(2x2, 3x3); w [K, C, 3, 3] turned into the input
/// gradient's filter when `adjoint` (x then the output gradient, g its geometry, K = C of w).
template <class T>
void winograd_conv(const kernels::cpu::ConvGeometry& g, std::int64_t K, const T* x, const T* w, bool adjoint,
                   const T* b, bool relu, bool accumulate, T* y) {
  namespace wg = kernels::cpu::winograd;
  const DType dt = dtype_of<T>::value;
  Tensor u = Tensor::empty({wg::kEntries, K, g.c}, dt);
  Tensor ws = Tensor::empty({wg::workspace_elements(g, K, sizeof(T))}, dt);
  if (adjoint)
    wg::filter_transform<T>(g.c, K, w, true, u.template data<T>());
  else
    wg::filter_transform<T>(K, g.c, w, false, u.template data<T>());
  wg::convolve<T>(g, K, x, u.template data<T>(), b, relu, accumulate, y, ws.template data<T>(), &host_gemm<T>);
}

/// The geometry of images [first, first + count) of g's batch.
inline kernels::cpu::ConvGeometry conv_chunk(kernels::cpu::ConvGeometry g, std::int64_t count) {
  g.n = count;
  return g;
}

/// The convolution kernels of `x`'s device, or an error naming the option that adds them.
inline const DeviceKernels& device_conv_kernels(const Tensor& x, const Tensor& w, const Tensor& b) {
  const auto& dk = device_kernels("conv2d", x, w, b);
  if (dk.conv_forward == nullptr)
    unsupported_on_device("conv2d", x.device(), "convolutions on CUDA devices need cuDNN: configure with -Dcudnn=enabled");
  return dk;
}

/// The device path of conv2d's backward: saved = {x, w} (no column matrix: cuDNN reads x).
inline void conv2d_backward_device(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &x = n.saved[0], &w = n.saved[1];
  const auto geo = conv_geometry(x, w, n.i[1], n.i[2]);
  const std::int64_t OC = w.dim(0), P = geo.oh() * geo.ow();
  const auto& dk = device_conv_kernels(x, w, g);
  const int dev = g.device().index;
  if (static_cast<Activation>(n.i[0]) == Activation::relu)  // g *= (y > 0), in place
    dk.unary_backward(dev, g.dtype(), kernels::math::Unary::relu, g.numel(), g.raw_data(), n.out.raw_data(),
                      n.out.raw_data(), 0.0, g.raw_data(), false);
  if (auto s = autograd::grad_slot(n.in[2], epoch))
    dk.channel_sums(dev, g.dtype(), geo.n, OC, P, g.raw_data(), s.dst.raw_data(), s.accumulate);
  if (auto s = autograd::grad_slot(n.in[1], epoch))
    dk.conv_backward_filter(dev, g.dtype(), geo, OC, x.raw_data(), g.raw_data(), s.dst.raw_data(), s.accumulate);
  if (auto s = autograd::grad_slot(n.in[0], epoch))
    dk.conv_backward_data(dev, g.dtype(), geo, OC, w.raw_data(), g.raw_data(), s.dst.raw_data(), s.accumulate);
}

/// conv2d's backward by Winograd's F(2x2, 3x3) (runs_winograd): the output gradient masked by
/// the fused ReLU in place, the bias gradient its sums, the weight gradient from the
/// transforms of x and of it, the input gradient its convolution with w turned by 180° and its
/// channel axes swapped, at padding 2 - p. saved = {x, w}.
inline void conv2d_backward_winograd(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &x = n.saved[0], &w = n.saved[1];
  const auto geo = conv_geometry(x, w, n.i[1], n.i[2]);
  const std::int64_t N = geo.n, OC = w.dim(0), P = geo.oh() * geo.ow();
  namespace wg = kernels::cpu::winograd;
  strata::detail::visit_floating(g.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    T* gp = g.template data<T>();
    if (static_cast<Activation>(n.i[0]) == Activation::relu)
      kernels::cpu::relu_mask_inplace<T>(g.numel(), n.out.template data<T>(), gp);
    if (auto db = autograd::grad_slot(n.in[2], epoch))
      for (std::int64_t b = 0; b < N; ++b)
        kernels::cpu::row_sums<T>(OC, P, gp + b * OC * P, P, db.dst.template data<T>(), db.accumulate || b > 0);
    if (auto dw = autograd::grad_slot(n.in[1], epoch)) {
      Tensor ws = Tensor::empty({wg::filter_gradient_workspace(geo, OC, sizeof(T))}, g.dtype());
      wg::filter_gradient<T>(geo, OC, x.template data<T>(), gp, dw.accumulate, dw.dst.template data<T>(),
                             ws.template data<T>(), &host_gemm<T>);
    }
    if (auto dx = autograd::grad_slot(n.in[0], epoch)) {
      const kernels::cpu::ConvGeometry adjoint{N, OC, geo.oh(), geo.ow(), 3, 3, 1, 2 - geo.pad};
      winograd_conv<T>(adjoint, geo.c, gp, w.template data<T>(), true, nullptr, false, dx.accumulate,
                       dx.dst.template data<T>());
    }
  });
}

/// conv2d's backward on the CPU, chunk by chunk (conv_chunk_images): the chunk's column
/// matrix is rebuilt from the saved input (or read from the saved columns: keeps_columns),
/// then gives the weight gradient, and the input gradient's columns are folded back into the
/// image by col2im while still in cache. saved = {x or the columns, w}; n.i[3]: columns saved.
inline void conv2d_backward(autograd::Node& n, std::uint64_t epoch) {
  const Tensor& g = autograd::grad_output(n);
  const Tensor &w = n.saved[1];
  const bool saved_cols = n.i[3] != 0;
  const Tensor* x = saved_cols ? nullptr : &n.saved[0];
  const auto geo = conv_geometry(n.in[0], w, n.i[1], n.i[2]);
  const std::int64_t N = geo.n, OC = w.dim(0), P = geo.oh() * geo.ow(), R = geo.rows();
  const std::int64_t image = geo.c * geo.h * geo.w, nb = conv_chunk_images(geo, size_of(g.dtype()));
  auto dx = autograd::grad_slot(n.in[0], epoch);
  auto dw = autograd::grad_slot(n.in[1], epoch);
  auto db = autograd::grad_slot(n.in[2], epoch);
  Tensor cols = dw && !saved_cols ? Tensor::empty({R, nb * P}, g.dtype()) : Tensor();
  Tensor dcols = dx ? Tensor::empty({R, nb * P}, g.dtype()) : Tensor();
  Tensor padded = Tensor::empty({kernels::cpu::padded_elements(conv_chunk(geo, nb))}, g.dtype());
  strata::detail::visit_floating(g.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    const bool relu = static_cast<Activation>(n.i[0]) == Activation::relu;
    T* gp = g.template data<T>();
    const T* wp = w.template data<T>();
    const bool per_image = per_image_gemm(P);
    Tensor gt, dbias;
    if (per_image) {
      // Large output planes: GEMMs per image read the gradient in its NCHW layout, so it is
      // masked in place and never permuted.
      if (relu) kernels::cpu::relu_mask_inplace<T>(g.numel(), n.out.template data<T>(), gp);
      if (db)
        for (std::int64_t b = 0; b < N; ++b)
          kernels::cpu::row_sums<T>(OC, P, gp + b * OC * P, P, db.dst.template data<T>(), db.accumulate || b > 0);
    } else {
      gt = Tensor::empty({OC, nb * P}, g.dtype());
      dbias = Tensor::empty({OC}, g.dtype());
    }
    for (std::int64_t i0 = 0; i0 < N; i0 += nb) {
      const std::int64_t cnt = std::min(nb, N - i0), C = cnt * P;
      const auto gc = conv_chunk(geo, cnt);
      T* gi = gp + i0 * OC * P;
      T* pad = padded.template data<T>();
      // The chunk's columns: rebuilt here, or the saved batch's (its row stride N * P).
      const T* cc = nullptr;
      const std::int64_t ldc = saved_cols ? N * P : C;
      if (dw && saved_cols) {
        cc = n.saved[0].template data<T>() + i0 * P;
      } else if (dw) {
        kernels::cpu::im2col<T>(gc, x->template data<T>() + i0 * image, cols.template data<T>(), pad);
        cc = cols.template data<T>();
      }
      if (per_image) {
        for (std::int64_t b = 0; b < cnt; ++b) {
          if (dw)  // dW [OC, R] (+)= g_b cols_b^T
            gemm_strided<T>(false, true, OC, R, P, gi + b * OC * P, P, cc + b * P, ldc, dw.dst.template data<T>(), R,
                            dw.accumulate || i0 + b > 0);
          if (dx)  // dcols_b [R, P] = W^T g_b
            gemm_strided<T>(true, false, R, P, OC, wp, R, gi + b * OC * P, P, dcols.template data<T>() + b * P, C,
                            false);
        }
      } else {
        // gT [OC, cnt*P]: the (ReLU-masked) output gradient in the GEMM's column order, and its
        // row sums for the bias, in one pass.
        T* gtp = gt.template data<T>();
        kernels::cpu::conv_output_grad<T>(cnt, OC, P, gi, relu ? n.out.template data<T>() + i0 * OC * P : nullptr, gtp,
                                          dbias.template data<T>());
        if (db) kernels::cpu::copy_or_add<T>(OC, dbias.template data<T>(), db.dst.template data<T>(), db.accumulate || i0 > 0);
        if (dw)  // dW [OC, R] (+)= gT cols^T
          gemm_strided<T>(false, true, OC, R, C, gtp, C, cc, ldc, dw.dst.template data<T>(), R, dw.accumulate || i0 > 0);
        if (dx)  // dcols [R, cnt*P] = W^T gT
          gemm_strided<T>(true, false, R, C, OC, wp, R, gtp, C, dcols.template data<T>(), C, false);
      }
      if (dx)
        kernels::cpu::col2im<T>(gc, dcols.template data<T>(), dx.dst.template data<T>() + i0 * image, dx.accumulate, pad);
    }
  });
}

/// Records conv2d's node: its backward reads the contiguous input (or `cols`, the whole
/// batch's column matrix, where defined: keeps_columns) and weight.
inline Tensor record_conv2d(void (*backward)(autograd::Node&, std::uint64_t), const Tensor& out, const Tensor& x,
                            const Tensor& w, const Tensor& b, const Tensor& xc, const Tensor& wc, Activation act,
                            std::int64_t stride, std::int64_t padding, const Tensor& cols = {}) {
  if (auto* n = autograd::record("conv2d", backward, out, x, w, b)) {
    n->saved = {cols.defined() ? cols : xc, wc};
    n->i[0] = static_cast<std::int64_t>(act);
    n->i[1] = stride;
    n->i[2] = padding;
    n->i[3] = cols.defined();
  }
  return out;
}

}  // namespace ops::detail

/// 2-D convolution: x [N, C, H, W], w [OC, C, KH, KW], optional b [OC]; square stride and
/// zero padding; `act` fused into the output pass. Returns [N, OC, OH, OW].
inline Tensor conv2d(const Tensor& x, const Tensor& w, const Tensor& b = {}, std::int64_t stride = 1,
                     std::int64_t padding = 0, Activation act = Activation::none) {
  STRATA_CHECK(x.defined() && w.defined(), "conv2d: undefined operand");
  STRATA_CHECK(x.ndim() == 4 && w.ndim() == 4, "conv2d needs x [N, C, H, W] and weight [OC, C, KH, KW], got ",
               x.shape(), " and ", w.shape());
  STRATA_CHECK(x.dim(1) == w.dim(1), "conv2d: input has ", x.dim(1), " channels, weight expects ", w.dim(1));
  STRATA_CHECK(x.dtype() == w.dtype(), "conv2d: dtypes differ (", x.dtype(), " vs ", w.dtype(), ")");
  STRATA_CHECK(stride >= 1 && padding >= 0, "conv2d: stride ", stride, " and padding ", padding, " are invalid");
  STRATA_CHECK(!b.defined() || (b.ndim() == 1 && b.dim(0) == w.dim(0)), "conv2d: bias shape ", b.shape(),
               " does not match ", w.dim(0), " output channels");
  STRATA_CHECK(x.dim(2) + 2 * padding >= w.dim(2) && x.dim(3) + 2 * padding >= w.dim(3), "conv2d: kernel ",
               w.shape(), " larger than the padded input ", x.shape());
  Tensor xc = x.contiguous(), wc = w.contiguous();
  Tensor bc = b.defined() ? b.contiguous() : Tensor();
  const auto geo = ops::detail::conv_geometry(xc, wc, stride, padding);
  const std::int64_t N = geo.n, OC = wc.dim(0), P = geo.oh() * geo.ow(), R = geo.rows();
  if (on_device(x)) {
    const auto& dk = ops::detail::device_conv_kernels(xc, wc, bc);
    Tensor out = Tensor::empty({N, OC, geo.oh(), geo.ow()}, x.dtype(), x.device());
    const int dev = x.device().index;
    if (N == 0)  // no images: nothing to compute (cuDNN takes no empty batch)
      return ops::detail::record_conv2d(&ops::detail::conv2d_backward_device, out, x, w, b, xc, wc, act, stride,
                                        padding);
    dk.conv_forward(dev, x.dtype(), geo, OC, xc.raw_data(), wc.raw_data(), out.raw_data());
    if (bc.defined() || act == Activation::relu)
      dk.channel_bias_act(dev, x.dtype(), N, OC, P, out.raw_data(), bc.defined() ? bc.raw_data() : nullptr,
                          act == Activation::relu, out.raw_data());
    return ops::detail::record_conv2d(&ops::detail::conv2d_backward_device, out, x, w, b, xc, wc, act, stride, padding);
  }
  if (ops::detail::runs_winograd(geo, OC)) {
    Tensor out = Tensor::empty({N, OC, geo.oh(), geo.ow()}, x.dtype());
    strata::detail::visit_floating(x.dtype(), "conv2d", [&](auto tag) {
      using T = decltype(tag);
      ops::detail::winograd_conv<T>(geo, OC, xc.template data<T>(), wc.template data<T>(), false,
                                    bc.defined() ? bc.template data<T>() : nullptr, act == Activation::relu, false,
                                    out.template data<T>());
    });
    return ops::detail::record_conv2d(&ops::detail::conv2d_backward_winograd, out, x, w, b, xc, wc, act, stride,
                                      padding);
  }
  const std::int64_t nb = ops::detail::conv_chunk_images(geo, size_of(x.dtype())), image = geo.c * geo.h * geo.w;
  // The whole batch's columns, kept for the backward pass, when it will run and they are small.
  const bool keep = ops::detail::keeps_columns(geo) && GradMode::enabled() &&
                    (autograd::tracks_grad(x) || autograd::tracks_grad(w) || autograd::tracks_grad(b));
  Tensor cols = Tensor::empty({R, (keep ? N : nb) * P}, x.dtype());
  Tensor out = Tensor::empty({N, OC, geo.oh(), geo.ow()}, x.dtype());
  Tensor tmp = ops::detail::per_image_gemm(P) ? Tensor() : Tensor::empty({OC, nb * P}, x.dtype());
  Tensor padded = Tensor::empty({kernels::cpu::padded_elements(ops::detail::conv_chunk(geo, nb))}, x.dtype());
  strata::detail::visit_floating(x.dtype(), "conv2d", [&](auto tag) {
    using T = decltype(tag);
    T* y = out.template data<T>();
    T* cp = cols.template data<T>();
    const T* wp = wc.template data<T>();
    const T* bp = bc.defined() ? bc.template data<T>() : nullptr;
    const bool relu = act == Activation::relu;
    if (keep) kernels::cpu::im2col<T>(geo, xc.template data<T>(), cp, padded.template data<T>());
    const std::int64_t ldc = keep ? N * P : 0;  // the columns' row stride when kept (else the chunk's)
    for (std::int64_t i0 = 0; i0 < N; i0 += nb) {
      const std::int64_t cnt = std::min(nb, N - i0), C = cnt * P, ld = keep ? ldc : C;
      const T* cc = keep ? cp + i0 * P : cp;
      if (!keep)
        kernels::cpu::im2col<T>(ops::detail::conv_chunk(geo, cnt), xc.template data<T>() + i0 * image, cp,
                                padded.template data<T>());
      T* yi = y + i0 * OC * P;
      if (ops::detail::per_image_gemm(P)) {  // y_b [OC, P] = W cols_b, written in NCHW directly
        for (std::int64_t b = 0; b < cnt; ++b) {  // the bias and activation added as the product is written
          kernels::cpu::GemmArgs<T> g{false, false, OC, P, R, T(1), wp, R, cc + b * P, ld, T(0), yi + b * OC * P, P};
          g.row_bias = bp;
          g.relu = relu;
          ops::detail::host_gemm(g);
        }
        continue;
      }
      T* tp = tmp.template data<T>();
      ops::detail::gemm_strided<T>(false, false, OC, C, R, wp, R, cc, ld, tp, C, false);
      for (std::int64_t b = 0; b < cnt; ++b)  // [OC, cnt*P] -> [cnt, OC, P] with bias and activation, one pass
        kernels::cpu::row_bias_act_rows<T>(OC, P, tp + b * P, C, bp, relu, yi + b * OC * P, P);
    }
  });
  return ops::detail::record_conv2d(&ops::detail::conv2d_backward, out, x, w, b, xc, wc, act, stride, padding,
                                    keep ? cols : Tensor());
}

}  // namespace strata
