// nanobragg CUDA kernel: the per-pixel physics of nanobragg-core's
// render/kernel.rs (itself the pixel loop of nanoBragg.c), templated on the
// scalar type. Compiled at run time with NVRTC, one module per precision
// (-DNB_ONLY_F32 / -DNB_ONLY_F64; the f32 module also names its fast-path
// variant, -DNB_FAST_DEG/_EVEN/_GRID). Kernels: nb_render_f32 / nb_render_f64
// (every plan), nb_render_fast_f32 (grouped sources, see nb_fast_subpixel) and
// nb_render_simple_f64 (the C loop specialised for common plans).
//
// Every expression of the general and simple paths is written in the order of
// the Rust kernel so that the f64 instances (compiled with --fmad=false)
// reproduce the CPU result to rounding of the transcendental functions.

typedef unsigned long long u64;
typedef long long i64;

// struct Params (the parameter block), NB_PI and the spot-shape constants
// are generated from Rust (crates/cuda/src/params.rs) and prepended to this
// file before it is compiled.

// Sources buffer layout (scalar type T), nsources = n:
//   [0, 4n)   per source: -dir (incident), lambda      (C order, used by the exact path)
//   [4n, 5n)  1/lambda, sorted ascending within each run of equal directions
//   [5n, 6n)  at the first source of each such run: its length
//   [6n, 7n)  per source: the factor on its photons (weight / mean weight; read
//             only when p.weighted), C order
//   [7n, 8n)  the same factors in the order of the sorted 1/lambda
#define NB_SRC_INV(n) (4 * (n))
#define NB_SRC_RUN(n) (5 * (n))
#define NB_SRC_WEIGHT(n) (6 * (n))
#define NB_SRC_WEIGHT_SORTED(n) (7 * (n))

// Launch bounds (blocks of 128 threads): the minimum number of resident blocks
// per SM caps the registers (65536 / (128 * N)); the host may override them
// (-D, from NANOBRAGG_CUDA_MINBLOCKS). Chosen on an H100 (docs/gpu.md):
// general f32 uncapped (156 registers, as before); fast f32 uncapped (87);
// f64 kernels trade spills in the set-up code for occupancy, which the
// double-precision sin/division chains need.
#ifndef NB_MINB_F32
#define NB_MINB_F32 1
#endif
#ifndef NB_MINB_FAST
#define NB_MINB_FAST 1
#endif
#ifndef NB_MINB_SIMPLE
#define NB_MINB_SIMPLE 8
#endif
#ifndef NB_MINB_F64
#define NB_MINB_F64 4
#endif

#define NB_NONE 0xffffffffu

__device__ __forceinline__ float nb_sin(float x) { return sinf(x); }
__device__ __forceinline__ double nb_sin(double x) { return sin(x); }
__device__ __forceinline__ float nb_cos(float x) { return cosf(x); }
__device__ __forceinline__ double nb_cos(double x) { return cos(x); }
__device__ __forceinline__ float nb_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double nb_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float nb_exp(float x) { return expf(x); }
__device__ __forceinline__ double nb_exp(double x) { return exp(x); }
__device__ __forceinline__ float nb_atan2(float y, float x) { return atan2f(y, x); }
__device__ __forceinline__ double nb_atan2(double y, double x) { return atan2(y, x); }

template <typename T>
__device__ __forceinline__ T dot3(const T* x, const T* y) {
    return x[0] * y[0] + x[1] * y[1] + x[2] * y[2];
}

template <typename T>
__device__ __forceinline__ void cross3(const T* x, const T* y, T* out) {
    T o0 = x[1] * y[2] - x[2] * y[1];
    T o1 = x[2] * y[0] - x[0] * y[2];
    T o2 = x[0] * y[1] - x[1] * y[0];
    out[0] = o0;
    out[1] = o1;
    out[2] = o2;
}

template <typename T>
__device__ __forceinline__ T magnitude3(const T* v) {
    return nb_sqrt(v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
}

// unitize: out may alias v. Returns the original length.
template <typename T>
__device__ __forceinline__ T unitize3(const T* v, T* out) {
    T mag = magnitude3(v);
    if (mag != T(0)) {
        T o0 = v[0] / mag, o1 = v[1] / mag, o2 = v[2] / mag;
        out[0] = o0;
        out[1] = o1;
        out[2] = o2;
    } else {
        out[0] = T(0);
        out[1] = T(0);
        out[2] = T(0);
    }
    return mag;
}

template <typename T>
__device__ __forceinline__ void rotate_axis3(const T* v, const T* axis, T phi, T* out) {
    T sinphi = nb_sin(phi);
    T cosphi = nb_cos(phi);
    T d = (axis[0] * v[0] + axis[1] * v[1] + axis[2] * v[2]) * (T(1) - cosphi);
    T o0 = axis[0] * d + v[0] * cosphi + (-axis[2] * v[1] + axis[1] * v[2]) * sinphi;
    T o1 = axis[1] * d + v[1] * cosphi + (axis[2] * v[0] - axis[0] * v[2]) * sinphi;
    T o2 = axis[2] * d + v[2] * cosphi + (-axis[1] * v[0] + axis[0] * v[1]) * sinphi;
    out[0] = o0;
    out[1] = o1;
    out[2] = o2;
}

template <typename T>
__device__ __forceinline__ T polarization_factor(T kahn, const T* incident_in, const T* diffracted_in, const T* axis_in) {
    T incident[3], diffracted[3], axis[3];
    unitize3(incident_in, incident);
    unitize3(diffracted_in, diffracted);
    unitize3(axis_in, axis);
    T cos2theta = dot3(incident, diffracted);
    T cos2theta_sqr = cos2theta * cos2theta;
    T sin2theta_sqr = T(1) - cos2theta_sqr;
    T psi = T(0);
    if (kahn != T(0)) {
        T b_in[3], e_in[3];
        cross3(axis, incident, b_in);
        unitize3(b_in, b_in);
        cross3(incident, b_in, e_in);
        unitize3(e_in, e_in);
        T e_out = dot3(diffracted, e_in);
        T b_out = dot3(diffracted, b_in);
        psi = -nb_atan2(b_out, e_out);
    }
    return T(0.5) * (T(1) + cos2theta_sqr - kahn * nb_cos(T(2) * psi) * sin2theta_sqr);
}

template <typename T>
__device__ __forceinline__ T sincg(T x, T n) {
    if (x == T(0)) return n;
    return nb_sin(x * n) / nb_sin(x);
}

// The square crystal's lattice factor sincg(pi h, na) sincg(pi k, nb)
// sincg(pi l, nc), as the CPU's exact path (render/kernel.rs exact_grating).
// A fractional N (possible only through the library) takes the index's
// fractional part h - rint(h) first (grating_index: the continuous extension
// of the whole-N spots; C's formula has a pole at every whole h then).
// f64: the C formula, literally (bit parity with the CPU's exact path).
// f32: pi*h and pi*h*n cannot be formed accurately in single precision near a
// Bragg peak (where both sines are small), so each argument is reduced first:
// with h = m + f (m = rint(h)) and whole n,
//   sin(pi n h) / sin(pi h) = (-1)^((n-1) m) sinpi(n f) / sinpi(f)
// (exact algebra; sinpif does the remaining reduction exactly), and the three
// quotients share one division, as the CPU's fast path does.
__device__ __forceinline__ double exact_grating(double h, double n) {
    const double pi = NB_PI;
    if (n != trunc(n)) return sincg(pi * (h - rint(h)), n);
    return sincg(pi * h, n);
}
__device__ __forceinline__ double square_lattice(double h, double k, double l, double na, double nb, double nc) {
    double f = 1.0;
    if (na > 1.0) f *= exact_grating(h, na);
    if (nb > 1.0) f *= exact_grating(k, nb);
    if (nc > 1.0) f *= exact_grating(l, nc);
    return f;
}
__device__ __forceinline__ void grating_parts(float h, float n, float& num, float& den) {
    if (h == 0.0f) {
        num *= n;
        return;
    }
    if (n == rintf(n) && fabsf(h) < 4194304.0f && fabsf(n) < 4194304.0f) {
        float m = rintf(h);
        float f = h - m;  // exact
        float a = n, b = 1.0f;
        if (f != 0.0f) {
            a = sinpif(f * n);
            b = sinpif(f);
        }
        if ((((int)n - 1) & (int)m) & 1) a = -a;
        num *= a;
        den *= b;
        return;
    }
    // fractional N: the fractional part of h (the CPU's GratingForm::General)
    const float f = n == rintf(n) ? h : h - rintf(h);
    if (f == 0.0f) {
        num *= n;
        return;
    }
    num *= sinpif(f * n);
    den *= sinpif(f);
}
__device__ __forceinline__ float square_lattice(float h, float k, float l, float na, float nb, float nc) {
    float num = 1.0f, den = 1.0f;
    if (na > 1.0f) grating_parts(h, na, num, den);
    if (nb > 1.0f) grating_parts(k, nb, num, den);
    if (nc > 1.0f) grating_parts(l, nc, num, den);
    return num / den;
}

// Nearest whole number as nanoBragg.c takes it: ceil(x - 0.5), in the
// kernel's precision (as the CPU kernels do).
__device__ __forceinline__ double nearest_index(double x) { return ceil(x - 0.5); }
__device__ __forceinline__ float nearest_index(float x) { return ceilf(x - 0.5f); }

template <typename T>
__device__ __forceinline__ T sinc3(T x) {
    if (x == T(0)) return T(1);
    return T(3) * (nb_sin(x) / x - nb_cos(x)) / (x * x);
}

template <typename T>
__device__ __forceinline__ T polint(const double* xa, const T* ya, T x) {
    T d0 = x - T(xa[0]);
    T d1 = x - T(xa[1]);
    T d2 = x - T(xa[2]);
    T d3 = x - T(xa[3]);
    T x0 = d1 * d2 * d3 * ya[0] / T((xa[0] - xa[1]) * (xa[0] - xa[2]) * (xa[0] - xa[3]));
    T x1 = d0 * d2 * d3 * ya[1] / T((xa[1] - xa[0]) * (xa[1] - xa[2]) * (xa[1] - xa[3]));
    T x2 = d0 * d1 * d3 * ya[2] / T((xa[2] - xa[0]) * (xa[2] - xa[1]) * (xa[2] - xa[3]));
    T x3 = d0 * d1 * d2 * ya[3] / T((xa[3] - xa[0]) * (xa[3] - xa[1]) * (xa[3] - xa[2]));
    return x0 + x1 + x2 + x3;
}

template <typename T>
__device__ __forceinline__ T grid_at(const Params& p, const T* __restrict__ grid, int dh, int dk, int dl) {
    i64 nk = (i64)(p.k_max - p.k_min + 1 + 1);
    i64 nl = (i64)(p.l_max - p.l_min + 1 + 1);
    return grid[((i64)dh * nk + (i64)dk) * nl + (i64)dl];
}

template <typename T>
__device__ __forceinline__ T f_nearest(const Params& p, const T* __restrict__ grid, T h0f, T k0f, T l0f) {
    if (!(p.has_grid && p.hkls_pos)) return T(p.default_f);
    // converted only here: most plans have no grid and never need the indices
    const i64 h0 = (i64)h0f, k0 = (i64)k0f, l0 = (i64)l0f;
    if (h0 <= (i64)p.h_max && h0 >= (i64)p.h_min && k0 <= (i64)p.k_max && k0 >= (i64)p.k_min &&
        l0 <= (i64)p.l_max && l0 >= (i64)p.l_min) {
        return grid_at(p, grid, (int)(h0 - p.h_min), (int)(k0 - p.k_min), (int)(l0 - p.l_min));
    }
    return T(p.default_f);
}

// Tricubic lookup with nanoBragg.c's fallback: the first out-of-range point
// clears `interpolate` (for the rest of this pixel) and is recorded in oor.
template <typename T>
__device__ __forceinline__ T structure_factor(const Params& p, const T* __restrict__ grid, T h, T k, T l, T h0, T k0,
                                              T l0, bool& interpolate, bool& oor, double* oor_info) {
    if (interpolate) {
        if (p.has_grid) {
            double hv = (double)h, kv = (double)k, lv = (double)l;
            double hmin = (double)p.h_min, kmin = (double)p.k_min, lmin = (double)p.l_min;
            double h_range = (double)(p.h_max - p.h_min + 1);
            double k_range = (double)(p.k_max - p.k_min + 1);
            double l_range = (double)(p.l_max - p.l_min + 1);
            if ((hv - hmin + 3.0) > h_range || (hv - 2.0 < hmin) || (kv - kmin + 3.0) > k_range || (kv - 2.0 < kmin) ||
                (lv - lmin + 3.0) > l_range || (lv - 2.0 < lmin)) {
                if (!oor) {
                    oor = true;
                    oor_info[0] = hv;
                    oor_info[1] = kv;
                    oor_info[2] = lv;
                    oor_info[3] = (double)(i64)h0;
                    oor_info[4] = (double)(i64)k0;
                    oor_info[5] = (double)(i64)l0;
                }
                interpolate = false;
            } else {
                int hf = (int)floor(hv);
                int kf = (int)floor(kv);
                int lf = (int)floor(lv);
                double xa[4] = {(double)(hf - 1), (double)hf, (double)(hf + 1), (double)(hf + 2)};
                double ya[4] = {(double)(kf - 1), (double)kf, (double)(kf + 1), (double)(kf + 2)};
                double za[4] = {(double)(lf - 1), (double)lf, (double)(lf + 1), (double)(lf + 2)};
                T planes[4];
                for (int i1 = 0; i1 < 4; i1++) {
                    T rows[4];
                    for (int i2 = 0; i2 < 4; i2++) {
                        T vals[4];
                        for (int i3 = 0; i3 < 4; i3++) {
                            vals[i3] = grid_at(p, grid, hf - 1 + i1 - p.h_min, kf - 1 + i2 - p.k_min, lf - 1 + i3 - p.l_min);
                        }
                        rows[i2] = polint(za, vals, l);
                    }
                    planes[i1] = polint(ya, rows, k);
                }
                return polint(xa, planes, h);
            }
        } else {
            interpolate = false;
        }
    }
    return f_nearest(p, grid, h0, k0, l0);
}

template <typename T>
__device__ __forceinline__ T lattice(const Params& p, T h, T k, T l, T h0, T k0, T l0) {
    const T pi = T(NB_PI);
    const T na = T(p.na), nb = T(p.nb), nc = T(p.nc);
    if (p.shape == 0) {
        return square_lattice(h, k, l, na, nb, nc);
    }
    T dh = h - h0;
    T dk = k - k0;
    T dl = l - l0;
    T fudge = T(p.fudge);
    if (p.shape == 1) {
        T hrad_sqr = dh * dh * na * na + dk * dk * nb * nb + dl * dl * nc * nc;
        return na * nb * nc * T(ROUND_XTAL_SCALE) * sinc3(pi * nb_sqrt(hrad_sqr * fudge));
    }
    T as0 = T(p.a_star[0]), as1 = T(p.a_star[1]), as2 = T(p.a_star[2]);
    T bs0 = T(p.b_star[0]), bs1 = T(p.b_star[1]), bs2 = T(p.b_star[2]);
    T cs0 = T(p.c_star[0]), cs1 = T(p.c_star[1]), cs2 = T(p.c_star[2]);
    T dx = dh * as0 + dk * bs0 + dl * cs0;
    T dy = dh * as1 + dk * bs1 + dl * cs1;
    T dz = dh * as2 + dk * bs2 + dl * cs2;
    T rad_star_sqr = (dx * dx + dy * dy + dz * dz) * na * na * nb * nb * nc * nc;
    if (p.shape == 2) {
        return na * nb * nc * nb_exp(-(rad_star_sqr / T(GAUSS_XTAL_WIDTH) * fudge));
    }
    bool inside = (double)(rad_star_sqr * fudge) < TOPHAT_RADIUS_SQR;
    return na * nb * nc * (inside ? T(1) : T(0));
}

// ---------------------------------------------------------------------------
// f32 fast path: sources grouped by direction, cells outer, wavelengths inner.
//
// Sources that share a direction differ only in wavelength, so
//   h = a . (d - i) / lambda = (a . (d - i)) * (1/lambda):
// the three dot products are formed once per (direction, cell) and scaled by
// 1/lambda (exact to f32 rounding) per wavelength. Summation order changes,
// so this path is only taken when every sample is simply added (no
// -oversample_* flag multiplies the running sum, no tricubic fallback).
//
// Square crystal, whole N <= 12: with t = pi h and y = sin^2 t,
//   (sin(N t) / sin t)^2 = U_{N-1}(cos t)^2 = (1 - y)^e P(y)^2,
// e = 1 for even N, where P is a polynomial of degree floor((N-1)/2) with
// integer coefficients (host side, `lattice_poly`). Only y is needed, which is
// periodic in h with period 1 and even, so h is reduced to f = h - rint(h),
// |f| <= 1/2, and sin^2(pi f) = f^2 Q(f^2)^2 with a minimax Q (relative error
// 5e-9). No division, no transcendental call, no sign bookkeeping.

template <int DEG>
__device__ __forceinline__ float nb_horner(const float* c, float y) {
    float r = c[DEG];
#pragma unroll
    for (int i = DEG - 1; i >= 0; i--) r = fmaf(r, y, c[i]);
    return r;
}

// sin^2(pi h) for |h| < 2^22.
__device__ __forceinline__ float nb_sinpi_sq(float h) {
    const float magic = 12582912.0f;  // 1.5 * 2^23: (h + magic) - magic = rint(h)
    float r = (h + magic) - magic;
    float f = h - r;  // exact, |f| <= 1/2
    float x = f * f;
    float q = fmaf(fmaf(fmaf(fmaf(0.07756059616804123f, x, -0.5982422232627869f), x, 2.550069808959961f), x,
                        -5.167709827423096f),
                   x, 3.1415927410125732f);
    return x * (q * q);
}

// |h| >= 2^22 (never in practice): out of line, to keep the hot loop small.
__device__ __noinline__ float nb_square_lattice_cold(float h, float k, float l, float na, float nb, float nc) {
    return square_lattice(h, k, l, na, nb, nc);
}

// The module the host compiles holds one variant of the fast path (see
// NB_FAST_DEG below), inlined; the host emulation builds all of them, out of line.
#if defined(NB_FAST_DEG)
#define NB_FAST_INLINE __forceinline__
#else
#define NB_FAST_INLINE __noinline__
#endif

// Polarization (once per pixel), then diffracted is unitized again, as in C.
__device__ NB_FAST_INLINE float nb_polar_cold(float kahn, const float* incident, float* diffracted,
                                            const float* polar_axis) {
    float polar = polarization_factor(kahn, incident, diffracted, polar_axis);
    unitize3(diffracted, diffracted);
    return polar;
}

// Sum over the cells and the (grouped) sources of one sub-pixel, added to
// i_acc. diffracted is the unit vector to the sub-pixel; polar follows the C
// rule (computed at the first source that passes the dmin cut).
template <int DEG, bool EVEN, bool GRID>
__device__ NB_FAST_INLINE void nb_fast_subpixel(const Params& p, const float* __restrict__ cells, const float* __restrict__ sources,
                                 const float* __restrict__ grid, float* diffracted, const float* polar_axis,
                                 float& polar, float& i_acc) {
    const int ns = p.nsources;
    const int ncells = p.ncells;
    const float* __restrict__ inv = sources + NB_SRC_INV(ns);
    const float* __restrict__ run = sources + NB_SRC_RUN(ns);
    const float* __restrict__ wsorted = sources + NB_SRC_WEIGHT_SORTED(ns);
    const bool weighted = p.weighted != 0;
    const float dmin = p.fast_dmin;
    const float kahn = p.fast_kahn;
    const float na = p.fast_n[0], nb = p.fast_n[1], nc = p.fast_n[2];
    const float f2 = p.fast_f2;
    float ca[NB_LAT_TERMS], cb[NB_LAT_TERMS], cc[NB_LAT_TERMS];
    for (int i = 0; i < NB_LAT_TERMS; i++) {
        ca[i] = p.lat_coef[i];
        cb[i] = p.lat_coef[NB_LAT_TERMS + i];
        cc[i] = p.lat_coef[2 * NB_LAT_TERMS + i];
    }
    const float ea = p.lat_even[0], eb = p.lat_even[1], ec = p.lat_even[2];
    for (int g = 0; g < ns;) {
        const int count = (int)run[g];
        const float inc[3] = {sources[4 * g], sources[4 * g + 1], sources[4 * g + 2]};
        float dm[3] = {diffracted[0] - inc[0], diffracted[1] - inc[1], diffracted[2] - inc[2]};
        // dmin cut: dmin > lambda / |d - i|, i.e. 1/lambda > 1/(dmin |d - i|); the
        // run's 1/lambda are ascending, so the sources that pass are a prefix.
        int npass = count;
        if (dmin > 0.0f) {
            const float il_max = 1.0f / (dmin * sqrtf(dm[0] * dm[0] + dm[1] * dm[1] + dm[2] * dm[2]));
            npass = 0;
            while (npass < count && !(inv[g + npass] > il_max)) npass++;
        }
        if (npass > 0 && polar == 0.0f) {
            polar = nb_polar_cold(kahn, inc, diffracted, polar_axis);
            for (int i = 0; i < 3; i++) dm[i] = diffracted[i] - inc[i];
        }
        const float* __restrict__ il_run = inv + g;
        const float* __restrict__ w_run = wsorted + g;
        for (int c = 0; npass > 0 && c < ncells; c++) {
            const float* __restrict__ cell = cells + 9 * c;
            const float ha = cell[0] * dm[0] + cell[1] * dm[1] + cell[2] * dm[2];
            const float hb = cell[3] * dm[0] + cell[4] * dm[1] + cell[5] * dm[2];
            const float hc = cell[6] * dm[0] + cell[7] * dm[1] + cell[8] * dm[2];
            float acc = 0.0f;
            for (int s = 0; s < npass; s++) {
                const float il = il_run[s];
                const float h = ha * il, k = hb * il, l = hc * il;
                float latt_sq;
                float f_latt = 0.0f;  // only for DEG < 0 or GRID
                if constexpr (DEG >= 0) {
                    if (fmaxf(fabsf(h), fmaxf(fabsf(k), fabsf(l))) < 4194304.0f) {
                        const float ya = nb_sinpi_sq(h), yb = nb_sinpi_sq(k), yc = nb_sinpi_sq(l);
                        const float u = nb_horner<DEG>(ca, ya) * nb_horner<DEG>(cb, yb) * nb_horner<DEG>(cc, yc);
                        latt_sq = u * u;
                        if constexpr (EVEN) latt_sq *= fmaf(-ea, ya, 1.0f) * fmaf(-eb, yb, 1.0f) * fmaf(-ec, yc, 1.0f);
                    } else {
                        f_latt = nb_square_lattice_cold(h, k, l, na, nb, nc);
                        latt_sq = f_latt * f_latt;
                    }
                    if constexpr (GRID) f_latt = latt_sq;  // only its being zero matters below
                } else {
                    float h0 = 0.0f, k0 = 0.0f, l0 = 0.0f;
                    if (p.shape != 0) {
                        h0 = nearest_index(h);
                        k0 = nearest_index(k);
                        l0 = nearest_index(l);
                    }
                    f_latt = lattice(p, h, k, l, h0, k0, l0);
                    latt_sq = f_latt * f_latt;
                }
                if (weighted) latt_sq *= w_run[s];
                if constexpr (GRID) {
                    if (f_latt != 0.0f) {
                        const float f_cell =
                            f_nearest(p, grid, nearest_index(h), nearest_index(k), nearest_index(l));
                        acc = fmaf(f_cell * f_cell, latt_sq, acc);
                    }
                } else {
                    acc += latt_sq;
                }
            }
            i_acc += GRID ? acc : f2 * acc;
        }
        g += count;
    }
}

__device__ __forceinline__ void nb_fast_dispatch(const Params& p, const float* __restrict__ cells,
                                              const float* __restrict__ sources, const float* __restrict__ grid,
                                              float* diffracted, const float* polar_axis, float& polar,
                                              float& i_acc) {
#if defined(NB_FAST_DEG)
#define NB_FAST(D, E) nb_fast_subpixel<D, E, (NB_FAST_GRID) != 0>(p, cells, sources, grid, diffracted, polar_axis, polar, i_acc)
#else
#define NB_FAST(D, E)                                                                                    \
    do {                                                                                                 \
        if (p.grid_lookup)                                                                               \
            nb_fast_subpixel<D, E, true>(p, cells, sources, grid, diffracted, polar_axis, polar, i_acc); \
        else                                                                                             \
            nb_fast_subpixel<D, E, false>(p, cells, sources, grid, diffracted, polar_axis, polar, i_acc); \
    } while (0)
#endif
#if defined(NB_FAST_DEG)
    // the host compiled this module for the plan's variant
    NB_FAST(NB_FAST_DEG, (NB_FAST_EVEN) != 0);
#else
    const bool even = p.lat_any_even != 0;
    switch (p.lat_deg) {
        case 1: if (even) NB_FAST(1, true); else NB_FAST(1, false); break;
        case 2: if (even) NB_FAST(2, true); else NB_FAST(2, false); break;
        case 3: if (even) NB_FAST(3, true); else NB_FAST(3, false); break;
        case 4: if (even) NB_FAST(4, true); else NB_FAST(4, false); break;
        case 5: if (even) NB_FAST(5, true); else NB_FAST(5, false); break;
        default: NB_FAST(-1, false); break;
    }
#endif
#undef NB_FAST
}

// Kernel paths: the general one; the f32 grouped-source path; and the C loop
// specialised for plans with p.fast, no tricubic interpolation and a square
// crystal (same operations, in the same order, as the general path: the f64
// image stays bit-identical; the code is smaller, so more threads fit).
#define NB_PATH_GENERAL 0
#define NB_PATH_FAST 1
#define NB_PATH_SIMPLE 2

// One pixel, exactly as Kernel::pixel.
template <typename T, int PATH>
__device__ __forceinline__ void nb_pixel(const Params& p, const T* __restrict__ cells, const T* __restrict__ sources,
                         const T* __restrict__ grid, int fpixel, int spixel, bool& interpolate, bool& oor,
                         double* oor_info, T& value_out, double& omega_out) {
    const T zero = T(0), one = T(1), half = T(0.5);
    double omega_sum = 0.0;
    T i_acc = T(p.i_bg);
    T polar = p.nopolar ? one : zero;
    T omega_pixel = zero;
    T capture_fraction = zero;
    constexpr bool FAST = PATH == NB_PATH_FAST;
    constexpr bool SIMPLE = PATH == NB_PATH_SIMPLE;  // also implied by FAST
    const bool os_omega = !(FAST || SIMPLE) && p.os_omega;
    const bool os_polar = !(FAST || SIMPLE) && p.os_polar;
    const bool os_thick = !(FAST || SIMPLE) && p.os_thick;
    const int os = p.oversample;
    const T subpixel = T(p.subpixel);
    const T pixel = T(p.pixel);
    T fdet[3], sdet[3], odet[3], pix0[3], beam[3], polar_axis[3];
    for (int i = 0; i < 3; i++) {
        fdet[i] = T(p.fdet[i]);
        sdet[i] = T(p.sdet[i]);
        odet[i] = T(p.odet[i]);
        pix0[i] = T(p.pix0[i]);
        beam[i] = T(p.beam[i]);
        polar_axis[i] = T(p.polar_axis[i]);
    }
    const T distance = T(p.distance);
    const T close_distance = T(p.close_distance);
    const T thickstep = T(p.thickstep);
    const T mu = T(p.mu);
    const T kahn = T(p.kahn);
    const T dmin = T(p.dmin);
    const bool water = p.water_size != 0.0;

    for (int thick_tic = 0; thick_tic < p.thicksteps; thick_tic++) {
        const T odet_pos = T((double)thick_tic) * thickstep;
        capture_fraction = p.thick_zero ? one : zero;
        for (int sub_s = 0; sub_s < os; sub_s++) {
            for (int sub_f = 0; sub_f < os; sub_f++) {
                T fdet_pos = subpixel * T((double)((i64)fpixel * os + sub_f)) + subpixel / T(2);
                T sdet_pos = subpixel * T((double)((i64)spixel * os + sub_s)) + subpixel / T(2);
                T pos[3];
                for (int i = 0; i < 3; i++) {
                    pos[i] = fdet_pos * fdet[i] + sdet_pos * sdet[i] + odet_pos * odet[i] + pix0[i];
                }
                if (p.curved) {
                    T v[3] = {distance * beam[0], distance * beam[1], distance * beam[2]};
                    T nv[3];
                    rotate_axis3(v, sdet, pos[1] / distance, nv);
                    rotate_axis3(nv, fdet, pos[2] / distance, pos);
                }
                T diffracted[3];
                T airpath = unitize3(pos, diffracted);
                if (omega_pixel == zero || os_omega) {
                    omega_pixel = pixel * pixel / airpath / airpath * close_distance / airpath;
                    if (p.point_pixel) {
                        omega_pixel = one / airpath / airpath;
                    }
                }
                omega_sum += (double)omega_pixel;
                if (capture_fraction == zero || os_thick) {
                    T parallax = dot3(diffracted, odet);
                    T t = T((double)thick_tic);
                    capture_fraction = nb_exp(-t * thickstep * mu / parallax) - nb_exp(-(t + one) * thickstep * mu / parallax);
                }
                if constexpr (FAST) {
                    nb_fast_dispatch(p, cells, sources, grid, diffracted, polar_axis, polar, i_acc);
                } else {
                for (int src = 0; src < p.nsources; src++) {
                    T incident[3] = {sources[4 * src], sources[4 * src + 1], sources[4 * src + 2]};
                    T lambda = sources[4 * src + 3];
                    T scattering[3] = {(diffracted[0] - incident[0]) / lambda, (diffracted[1] - incident[1]) / lambda,
                                       (diffracted[2] - incident[2]) / lambda};
                    T stol = half * magnitude3(scattering);
                    if (dmin > zero && stol > zero && dmin > half / stol) {
                        continue;
                    }
                    if (polar == zero || os_polar) {
                        polar = polarization_factor(kahn, incident, diffracted, polar_axis);
                        unitize3(diffracted, diffracted);
                    }
                    for (int c = 0; c < p.ncells; c++) {
                        const T* cell = cells + 9 * c;
                        T h = cell[0] * scattering[0] + cell[1] * scattering[1] + cell[2] * scattering[2];
                        T k = cell[3] * scattering[0] + cell[4] * scattering[1] + cell[5] * scattering[2];
                        T l = cell[6] * scattering[0] + cell[7] * scattering[1] + cell[8] * scattering[2];
                        // the nearest indices only feed non-square shapes and grid lookups
                        T h0 = zero, k0 = zero, l0 = zero;
                        if ((!SIMPLE && p.shape != 0) || p.has_grid) {
                            h0 = nearest_index(h);
                            k0 = nearest_index(k);
                            l0 = nearest_index(l);
                        }
                        T f_latt;
                        if constexpr (SIMPLE) {
                            f_latt = square_lattice(h, k, l, T(p.na), T(p.nb), T(p.nc));
                        } else {
                            f_latt = lattice(p, h, k, l, h0, k0, l0);
                        }
                        if (f_latt == zero && !water) {
                            continue;
                        }
                        T f_cell;
                        if constexpr (SIMPLE) {
                            f_cell = f_nearest(p, grid, h0, k0, l0);
                        } else {
                            f_cell = structure_factor(p, grid, h, k, l, h0, k0, l0, interpolate, oor, oor_info);
                        }
                        if (p.weighted) {
                            i_acc += f_cell * f_cell * f_latt * f_latt * sources[NB_SRC_WEIGHT(p.nsources) + src];
                        } else {
                            i_acc += f_cell * f_cell * f_latt * f_latt;
                        }
                        if (os_thick) i_acc *= capture_fraction;
                        if (os_polar) i_acc *= polar;
                        if (os_omega) i_acc *= omega_pixel;
                    }
                }
                }  // FAST
            }
        }
    }
    T value = T(p.scale) * i_acc / T(p.steps);
    if (!os_thick) value *= capture_fraction;
    if (!os_polar) value *= polar;
    if (!os_omega) value *= omega_pixel;
    value_out = value;
    omega_out = omega_sum;
}

__device__ __forceinline__ bool nb_rendered(const Params& p, const unsigned short* __restrict__ mask, int f, int s) {
    if ((i64)f < p.roi[0] || (i64)f > p.roi[1] || (i64)s < p.roi[2] || (i64)s > p.roi[3]) return false;
    if (p.has_mask) return mask[(i64)s * p.fpixels + f] != 0;
    return true;
}

// mode 0: first pass, every pixel starts with the plan's interpolation choice;
//         pixels that fall back atomicMin their index into *first.
// mode 1: re-render pixels with index > *first in nearest-neighbour mode.
// mode 2: one thread: re-run pixel *first and write its out-of-range point to info.
template <typename T, int PATH>
__device__ __forceinline__ void nb_render(const Params& p, const T* __restrict__ cells, const T* __restrict__ sources,
                          const T* __restrict__ grid, const unsigned short* __restrict__ mask, float* __restrict__ image,
                          double* __restrict__ omega, unsigned int* first, double* info, int mode) {
    const u64 npix = (u64)p.fpixels * (u64)p.spixels;
    u64 idx = (u64)blockIdx.x * blockDim.x + threadIdx.x;
    if (mode == 2) {
        if (idx != 0) return;
        unsigned int f0 = *first;
        if (f0 == NB_NONE) return;
        idx = f0;
    }
    if (idx >= npix) return;
    bool interpolate = p.interpolate != 0;
    if (mode == 1) {
        unsigned int f0 = *first;
        if (f0 == NB_NONE || idx <= (u64)f0) return;
        interpolate = false;
    }
    const int f = (int)(idx % (u64)p.fpixels);
    const int s = (int)(idx / (u64)p.fpixels);
    if (!nb_rendered(p, mask, f, s)) {
        if (mode == 0) {
            image[idx] = 0.0f;
            if (p.write_omega) omega[idx] = 0.0;
        }
        return;
    }
    bool oor = false;
    double oor_info[6];
    T value;
    double om;
    nb_pixel<T, PATH>(p, cells, sources, grid, f, s, interpolate, oor, oor_info, value, om);
    if (mode == 2) {
        if (oor) {
            for (int i = 0; i < 6; i++) info[i] = oor_info[i];
            info[6] = 1.0;
        }
        return;
    }
    image[idx] = (float)value;
    if (p.write_omega) omega[idx] = om;
    if (mode == 0 && oor) atomicMin(first, (unsigned int)idx);
}

// The host compiles one precision per module (NB_ONLY_F32 / NB_ONLY_F64);
// without either (host emulation) both kernels are built.
#if !defined(NB_ONLY_F64)
extern "C" __global__ void __launch_bounds__(128, NB_MINB_F32) nb_render_f32(const Params p, const float* __restrict__ cells,
                                         const float* __restrict__ sources, const float* __restrict__ grid,
                                         const unsigned short* __restrict__ mask, float* __restrict__ image,
                                         double* __restrict__ omega, unsigned int* first, double* info, int mode) {
    nb_render<float, NB_PATH_GENERAL>(p, cells, sources, grid, mask, image, omega, first, info, mode);
}

// The f32 grouped-source path (host: Params::fast and no tricubic interpolation,
// mode 0 only), as its own kernel so that its registers are not sized by the
// general path's.
extern "C" __global__ void __launch_bounds__(128, NB_MINB_FAST) nb_render_fast_f32(
    const Params p, const float* __restrict__ cells, const float* __restrict__ sources,
    const float* __restrict__ grid, const unsigned short* __restrict__ mask, float* __restrict__ image,
    double* __restrict__ omega, unsigned int* first, double* info, int mode) {
    nb_render<float, NB_PATH_FAST>(p, cells, sources, grid, mask, image, omega, first, info, mode);
}
#endif

#if !defined(NB_ONLY_F32)
// The simple path in f64 (host: Params::fast, no tricubic interpolation, square
// crystal; mode 0 only).
extern "C" __global__ void __launch_bounds__(128, NB_MINB_SIMPLE) nb_render_simple_f64(
    const Params p, const double* __restrict__ cells, const double* __restrict__ sources,
    const double* __restrict__ grid, const unsigned short* __restrict__ mask, float* __restrict__ image,
    double* __restrict__ omega, unsigned int* first, double* info, int mode) {
    nb_render<double, NB_PATH_SIMPLE>(p, cells, sources, grid, mask, image, omega, first, info, mode);
}

extern "C" __global__ void __launch_bounds__(128, NB_MINB_F64) nb_render_f64(const Params p, const double* __restrict__ cells,
                                         const double* __restrict__ sources, const double* __restrict__ grid,
                                         const unsigned short* __restrict__ mask, float* __restrict__ image,
                                         double* __restrict__ omega, unsigned int* first, double* info, int mode) {
    nb_render<double, NB_PATH_GENERAL>(p, cells, sources, grid, mask, image, omega, first, info, mode);
}
#endif

// Per-row sums of the per-pixel solid angles, in raster order (as the CPU
// driver sums them), so the host can finish the sum in the same order.
extern "C" __global__ void nb_row_omega(const double* __restrict__ omega, double* __restrict__ rows, int fpixels,
                                        int spixels) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= spixels) return;
    double acc = 0.0;
    const double* row = omega + (i64)r * fpixels;
    for (int f = 0; f < fpixels; f++) acc += row[f];
    rows[r] = acc;
}
