/// \file
/// im2col and col2im for small image planes on x86-64 CPUs with AVX-512, by permutes.
///
/// A ResNet on 28x28 images convolves planes of 4x4 to 28x28 pixels: a column-matrix row
/// holds runs of 4 to 28 floats per image, and copying them run by run cost a third of the
/// convolutions' time (more than their GEMMs at strides above 1). Here every 16 output floats
/// of a plane are one permute of a 32- or 64-float window of the input plane
/// (vpermt2ps: ~0.6 ns against ~4.6 ns for a 16-lane gather on a Zen 5 core). Which input
/// float each lane takes depends only on the plane geometry, not on the image or channel, so
/// it is worked out once per geometry (a Plan) and replayed over every plane: zero padding
/// is a lane left out, no padded copy of the images is made.
///
/// col2im runs the other way round, as gathers too: each 16 input pixels of a plane sum, tap
/// by tap, the column entries that read them (a permute of a window of that tap's row), so
/// every pixel is written once, with no read-modify-write of overlapping windows.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include <strata/config.hpp>  // STRATA_RESTRICT
#include <strata/kernels/math/conv_geometry.hpp>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define STRATA_IM2COL_AVX512 1
#include <immintrin.h>
#endif

namespace strata::kernels::cpu::im2col_avx512 {

/// One 16-lane vector of a destination plane, read from a source plane: lane l takes
/// src[base + index[l]] where l is in `lanes` (index < 64: a window of four 16-float pieces,
/// of which `load` names the floats read), else 0.
struct Step {
  std::int32_t index[16];
  std::int32_t base = 0;
  std::int32_t at = 0;    ///< where the vector starts in the destination plane (a multiple of 16)
  std::int32_t tap = 0;   ///< col2im: the kernel tap (i * kw + j) whose column row is read
  std::uint16_t load[4] = {};
  std::uint16_t lanes = 0;  ///< lanes with a source
  std::uint16_t high = 0;   ///< lanes whose index is 32 or more (the window's second half)
  std::uint16_t store = 0;  ///< lanes inside the destination plane
};

/// A geometry's steps (n and c aside: every plane replays them).
struct Plan {
  std::int64_t h = -1, w = 0, kh = 0, kw = 0, stride = 0, pad = 0;
  bool usable = false;          ///< every window within 64 floats (else the row-copy kernels run)
  std::vector<Step> gather;     ///< im2col: tap by tap (tap_begin), each tap's output plane
  std::vector<std::int32_t> tap_begin;
  std::vector<Step> scatter;    ///< col2im: input vector by input vector, the taps reaching it
};

/// Planes up to this many pixels, input or output, get a plan (a plan's size grows with them).
inline constexpr std::int64_t kMaxPlane = 4096;

namespace detail {

/// A step from the sources of its lanes (-1: none); false if they span 64 floats or more.
inline bool make_step(const std::array<std::int64_t, 16>& src, std::int32_t at, std::int32_t tap, std::int64_t store_lanes,
                      Step& s) {
  std::int64_t lo = -1, hi = -1;
  for (std::int64_t v : src)
    if (v >= 0) {
      lo = lo < 0 || v < lo ? v : lo;
      hi = v > hi ? v : hi;
    }
  if (lo >= 0 && hi - lo >= 64) return false;
  s = Step{};
  s.base = static_cast<std::int32_t>(lo < 0 ? 0 : lo);
  s.at = at;
  s.tap = tap;
  s.store = static_cast<std::uint16_t>(store_lanes >= 16 ? 0xffff : (1u << store_lanes) - 1);
  for (int l = 0; l < 16; ++l) {
    if (src[static_cast<std::size_t>(l)] < 0) continue;
    const auto rel = static_cast<std::int32_t>(src[static_cast<std::size_t>(l)] - s.base);
    s.index[l] = rel;
    s.lanes = static_cast<std::uint16_t>(s.lanes | (1u << l));
    if (rel >= 32) s.high = static_cast<std::uint16_t>(s.high | (1u << l));
    s.load[rel / 16] = static_cast<std::uint16_t>(s.load[rel / 16] | (1u << (rel % 16)));
  }
  return true;
}

/// Fills p for geometry g (its n and c unused).
inline void build(const math::ConvGeometry& g, Plan& p) {
  p.h = g.h, p.w = g.w, p.kh = g.kh, p.kw = g.kw, p.stride = g.stride, p.pad = g.pad;
  p.gather.clear();
  p.tap_begin.clear();
  p.scatter.clear();
  const std::int64_t oh = g.oh(), ow = g.ow(), P = oh * ow, HW = g.h * g.w;
  p.usable = P <= kMaxPlane && HW <= kMaxPlane;
  std::array<std::int64_t, 16> src{};
  for (std::int64_t i = 0; p.usable && i < g.kh; ++i)
    for (std::int64_t j = 0; p.usable && j < g.kw; ++j) {
      p.tap_begin.push_back(static_cast<std::int32_t>(p.gather.size()));
      for (std::int64_t q0 = 0; p.usable && q0 < P; q0 += 16) {
        for (std::int64_t l = 0; l < 16; ++l) {
          const std::int64_t q = q0 + l, iy = q / ow * g.stride - g.pad + i, ix = q % ow * g.stride - g.pad + j;
          src[static_cast<std::size_t>(l)] = q < P && iy >= 0 && iy < g.h && ix >= 0 && ix < g.w ? iy * g.w + ix : -1;
        }
        Step s;
        p.usable = make_step(src, static_cast<std::int32_t>(q0), static_cast<std::int32_t>(i * g.kw + j), P - q0, s);
        p.gather.push_back(s);
      }
    }
  p.tap_begin.push_back(static_cast<std::int32_t>(p.gather.size()));
  // col2im: input pixel (y, x) is read by tap (i, j) at output (oy, ox) = ((y + pad - i) / s,
  // (x + pad - j) / s) when those divide and lie in the output plane.
  for (std::int64_t t0 = 0; p.usable && t0 < HW; t0 += 16)
    for (std::int64_t i = 0; p.usable && i < g.kh; ++i)
      for (std::int64_t j = 0; p.usable && j < g.kw; ++j) {
        bool any = false;
        for (std::int64_t l = 0; l < 16; ++l) {
          const std::int64_t t = t0 + l, ry = t / g.w + g.pad - i, rx = t % g.w + g.pad - j;
          const bool hit = t < HW && ry >= 0 && rx >= 0 && ry % g.stride == 0 && rx % g.stride == 0 &&
                           ry / g.stride < oh && rx / g.stride < ow;
          src[static_cast<std::size_t>(l)] = hit ? ry / g.stride * ow + rx / g.stride : -1;
          any = any || hit;
        }
        if (!any) continue;
        Step s;
        p.usable = make_step(src, static_cast<std::int32_t>(t0), static_cast<std::int32_t>(i * g.kw + j), HW - t0, s);
        p.scatter.push_back(s);
      }
}

}  // namespace detail

/// The plan for g's geometry, from a per-thread cache (built on first use: no allocation once a
/// model's geometries are all in it).
inline const Plan& plan_for(const math::ConvGeometry& g) {
  thread_local std::array<Plan, 32> cache;
  thread_local std::size_t next = 0;
  for (const Plan& p : cache)
    if (p.h == g.h && p.w == g.w && p.kh == g.kh && p.kw == g.kw && p.stride == g.stride && p.pad == g.pad) return p;
  Plan& p = cache[next];
  next = (next + 1) % cache.size();
  detail::build(g, p);
  return p;
}

#ifdef STRATA_IM2COL_AVX512
/// A step's window reader, its fields in registers while it is replayed over many planes.
struct StepReader {
  __m512i index;
  __mmask16 l0, l1, l2, l3, lanes, high;
  std::int64_t o1, o2, o3;  // the pieces' offsets, 0 where no lane reads a piece (never addressed)

  [[gnu::target("avx512f")]] explicit StepReader(const Step& s)
      : index(_mm512_loadu_si512(s.index)), l0(s.load[0]), l1(s.load[1]), l2(s.load[2]), l3(s.load[3]),
        lanes(s.lanes), high(s.high), o1(s.load[1] ? 16 : 0), o2(s.load[2] ? 32 : 0), o3(s.load[3] ? 48 : 0) {}

  /// The 16 floats read from the window at w (0 in lanes without a source).
  template <bool kWide>
  [[gnu::target("avx512f"), gnu::always_inline]] inline __m512 read(const float* w) const {
    __m512 v = _mm512_maskz_permutex2var_ps(lanes, _mm512_maskz_loadu_ps(l0, w), index, _mm512_maskz_loadu_ps(l1, w + o1));
    if constexpr (kWide)  // (the index's low 5 bits pick within the second half)
      v = _mm512_mask_mov_ps(v, high, _mm512_permutex2var_ps(_mm512_maskz_loadu_ps(l2, w + o2), index,
                                                             _mm512_maskz_loadu_ps(l3, w + o3)));
    return v;
  }
};

/// cols[(c, i, j), (n, y, x)] = x[n, c, y * s - pad + i, x * s - pad + j], 0 outside the
/// image (kernels/cpu/conv.hpp's im2col), by p, a usable plan of g's geometry. Each step is
/// replayed over the batch's images before the next.
[[gnu::target("avx512f")]] inline void im2col(const math::ConvGeometry& g, const Plan& p, const float* STRATA_RESTRICT x,
                                              float* STRATA_RESTRICT cols) {
  const std::int64_t P = g.oh() * g.ow(), ncols = g.n * P, HW = g.h * g.w, taps = g.kh * g.kw, image = g.c * HW;
  for (std::int64_t c = 0; c < g.c; ++c)
    for (std::int64_t tap = 0; tap < taps; ++tap) {
      float* row = cols + (c * taps + tap) * ncols;
      const Step* first = p.gather.data() + p.tap_begin[static_cast<std::size_t>(tap)];
      const Step* last = p.gather.data() + p.tap_begin[static_cast<std::size_t>(tap + 1)];
      for (const Step* s = first; s != last; ++s) {
        const StepReader r(*s);
        const __mmask16 store = s->store;
        const float* w = x + c * HW + s->base;
        float* out = row + s->at;
        // (plain stores where the whole vector lies in the plane: a masked store that misses
        // the cache costs several times a plain one on AMD cores)
        if (s->high && store == 0xffff)
          for (std::int64_t n = 0; n < g.n; ++n, w += image, out += P) _mm512_storeu_ps(out, r.read<true>(w));
        else if (s->high)
          for (std::int64_t n = 0; n < g.n; ++n, w += image, out += P) _mm512_mask_storeu_ps(out, store, r.read<true>(w));
        else if (store == 0xffff)
          for (std::int64_t n = 0; n < g.n; ++n, w += image, out += P) _mm512_storeu_ps(out, r.read<false>(w));
        else
          for (std::int64_t n = 0; n < g.n; ++n, w += image, out += P) _mm512_mask_storeu_ps(out, store, r.read<false>(w));
      }
    }
}

/// col2im over B images at once (each step's reader shared by them).
template <int B>
[[gnu::target("avx512f")]] inline void col2im_images(const math::ConvGeometry& g, const Plan& p, std::int64_t n0, std::int64_t c,
                                                     const float* STRATA_RESTRICT cols, float* STRATA_RESTRICT dx,
                                                     bool accumulate) {
  const std::int64_t P = g.oh() * g.ow(), ncols = g.n * P, HW = g.h * g.w, taps = g.kh * g.kw, image = g.c * HW;
  const float* rows = cols + c * taps * ncols + n0 * P;  // tap t of image n0 + b at rows + t * ncols + b * P
  float* plane = dx + n0 * image + c * HW;
  const Step* s = p.scatter.data();
  const Step* const end = s + p.scatter.size();
  for (std::int64_t t0 = 0; t0 < HW; t0 += 16) {
    const auto store = static_cast<__mmask16>(HW - t0 >= 16 ? 0xffff : (1u << (HW - t0)) - 1);
    __m512 acc[B];
#pragma GCC unroll 4
    for (int b = 0; b < B; ++b)
      acc[b] = accumulate ? _mm512_maskz_loadu_ps(store, plane + b * image + t0) : _mm512_setzero_ps();
    for (; s != end && s->at == t0; ++s) {
      const StepReader r(*s);
      const float* w = rows + s->tap * ncols + s->base;
      if (s->high) {
#pragma GCC unroll 4
        for (int b = 0; b < B; ++b) acc[b] = _mm512_add_ps(acc[b], r.read<true>(w + b * P));
      } else {
#pragma GCC unroll 4
        for (int b = 0; b < B; ++b) acc[b] = _mm512_add_ps(acc[b], r.read<false>(w + b * P));
      }
    }
    if (store == 0xffff) {  // (plain stores where they can be, as im2col)
#pragma GCC unroll 4
      for (int b = 0; b < B; ++b) _mm512_storeu_ps(plane + b * image + t0, acc[b]);
    } else {
#pragma GCC unroll 4
      for (int b = 0; b < B; ++b) _mm512_mask_storeu_ps(plane + b * image + t0, store, acc[b]);
    }
  }
}

/// dx[n, c, y, x] (+)= the column entries that read it (kernels/cpu/conv.hpp's col2im), taps
/// in (i, j) order, by p, a usable plan of g's geometry. Overwrites dx unless `accumulate`.
[[gnu::target("avx512f")]] inline void col2im(const math::ConvGeometry& g, const Plan& p, const float* STRATA_RESTRICT cols,
                                              float* STRATA_RESTRICT dx, bool accumulate) {
  for (std::int64_t c = 0; c < g.c; ++c) {
    std::int64_t n = 0;
    for (; n + 4 <= g.n; n += 4) col2im_images<4>(g, p, n, c, cols, dx, accumulate);
    for (; n < g.n; ++n) col2im_images<1>(g, p, n, c, cols, dx, accumulate);
  }
}
#endif

}  // namespace strata::kernels::cpu::im2col_avx512
