//! SIMD number types for the CPU kernel (x86-64): one pixel per lane.
//!
//! Written with `std::arch` intrinsics. Every method is `#[inline(always)]`
//! and carries no target feature itself: it is meant to be inlined into a
//! function compiled with `#[target_feature(enable = ...)]` (the row
//! functions of `render::cpu`), which is only called after the CPU was
//! checked. The types are private to the crate for that reason: creating one
//! on a CPU without the instruction set would fault.
//!
//! Arithmetic, square root, comparisons and rounding are IEEE and lane-wise,
//! so a lane computes exactly what scalar code computes; the reference
//! transcendental functions (`sin`, `exp`, `atan2`, ...) call libm per lane
//! (used only by the exact mode); the fast mode uses [`crate::real::fast`].

/// Runs intrinsics that work on registers only (no memory access).
///
/// Their one requirement is the target features of the vector types they
/// take or make, and a value of those types exists only inside a function
/// compiled with the features of its module (the `#[target_feature]` row
/// functions of `render::cpu` and `diff::lanes`), which is only called after
/// the CPU was checked for them (`render::cpu::detect`; requested SIMD levels
/// are capped by it). The types are crate-private so that no other code can
/// build one.
macro_rules! intrinsics {
    ($($body:tt)*) => {
        // SAFETY: register-only intrinsics; their target features are enabled
        // wherever a value of these types exists (see above).
        unsafe { $($body)* }
    };
}

/// The strides and table length of a gather as i32 (the index type of the
/// gather instructions), or `None` where they do not fit and the lanes are
/// read one by one.
#[inline(always)]
fn gather_dims(table: &[f64], [s0, s1]: [usize; 2]) -> Option<(i32, i32, i32)> {
    Some((i32::try_from(s0).ok()?, i32::try_from(s1).ok()?, i32::try_from(table.len()).ok()?))
}

macro_rules! lanewise_libm {
    ($s:ty) => {
        #[inline(always)]
        fn sin(self) -> Self {
            self.map(<$s>::sin)
        }
        #[inline(always)]
        fn cos(self) -> Self {
            self.map(<$s>::cos)
        }
        #[inline(always)]
        fn tan(self) -> Self {
            self.map(<$s>::tan)
        }
        #[inline(always)]
        fn exp(self) -> Self {
            self.map(<$s>::exp)
        }
        #[inline(always)]
        fn ln(self) -> Self {
            self.map(<$s>::ln)
        }
        #[inline(always)]
        fn atan2(self, x: Self) -> Self {
            let (a, b) = (self.to_array(), x.to_array());
            Self::from_fn(|i| a[i].atan2(b[i]))
        }
    };
}

macro_rules! ops {
    ($t:ident, $add:ident, $sub:ident, $mul:ident, $div:ident) => {
        impl std::ops::Add for $t {
            type Output = Self;
            #[inline(always)]
            fn add(self, o: Self) -> Self {
                intrinsics! { $t($add(self.0, o.0)) }
            }
        }
        impl std::ops::Sub for $t {
            type Output = Self;
            #[inline(always)]
            fn sub(self, o: Self) -> Self {
                intrinsics! { $t($sub(self.0, o.0)) }
            }
        }
        impl std::ops::Mul for $t {
            type Output = Self;
            #[inline(always)]
            fn mul(self, o: Self) -> Self {
                intrinsics! { $t($mul(self.0, o.0)) }
            }
        }
        impl std::ops::Div for $t {
            type Output = Self;
            #[inline(always)]
            fn div(self, o: Self) -> Self {
                intrinsics! { $t($div(self.0, o.0)) }
            }
        }
        impl std::ops::AddAssign for $t {
            #[inline(always)]
            fn add_assign(&mut self, o: Self) {
                *self = *self + o;
            }
        }
        impl std::ops::SubAssign for $t {
            #[inline(always)]
            fn sub_assign(&mut self, o: Self) {
                *self = *self - o;
            }
        }
        impl std::ops::MulAssign for $t {
            #[inline(always)]
            fn mul_assign(&mut self, o: Self) {
                *self = *self * o;
            }
        }
        impl std::ops::DivAssign for $t {
            #[inline(always)]
            fn div_assign(&mut self, o: Self) {
                *self = *self / o;
            }
        }
    };
}

macro_rules! mask_ops {
    ($m:ident, $and:ident, $or:ident, $xor:ident, $ones:expr) => {
        impl std::ops::BitAnd for $m {
            type Output = Self;
            #[inline(always)]
            fn bitand(self, o: Self) -> Self {
                intrinsics! { $m($and(self.0, o.0)) }
            }
        }
        impl std::ops::BitOr for $m {
            type Output = Self;
            #[inline(always)]
            fn bitor(self, o: Self) -> Self {
                intrinsics! { $m($or(self.0, o.0)) }
            }
        }
        impl std::ops::Not for $m {
            type Output = Self;
            #[inline(always)]
            fn not(self) -> Self {
                intrinsics! { $m($xor(self.0, $ones)) }
            }
        }
    };
}

/// Bit operations of a mask held as one bit per lane in an integer.
macro_rules! bit_mask_ops {
    ($m:ident) => {
        impl std::ops::BitAnd for $m {
            type Output = Self;
            #[inline(always)]
            fn bitand(self, o: Self) -> Self {
                $m(self.0 & o.0)
            }
        }
        impl std::ops::BitOr for $m {
            type Output = Self;
            #[inline(always)]
            fn bitor(self, o: Self) -> Self {
                $m(self.0 | o.0)
            }
        }
        impl std::ops::Not for $m {
            type Output = Self;
            #[inline(always)]
            fn not(self) -> Self {
                $m(!self.0)
            }
        }
    };
}

/// AVX2 + FMA vectors: [`avx2::F64x4`] and [`avx2::F32x8`].
pub(crate) mod avx2 {
    use crate::real::{gather_lanes, Mask, Num};
    use std::arch::x86_64::*;

    /// Four f64 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct F64x4(__m256d);
    /// Eight f32 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct F32x8(__m256);
    /// Mask of [`F64x4`] (all-ones or all-zeros lanes).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct M64x4(__m256d);
    /// Mask of [`F32x8`].
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct M32x8(__m256);

    ops!(F64x4, _mm256_add_pd, _mm256_sub_pd, _mm256_mul_pd, _mm256_div_pd);
    ops!(F32x8, _mm256_add_ps, _mm256_sub_ps, _mm256_mul_ps, _mm256_div_ps);
    mask_ops!(
        M64x4,
        _mm256_and_pd,
        _mm256_or_pd,
        _mm256_xor_pd,
        _mm256_castsi256_pd(_mm256_set1_epi64x(-1))
    );
    mask_ops!(
        M32x8,
        _mm256_and_ps,
        _mm256_or_ps,
        _mm256_xor_ps,
        _mm256_castsi256_ps(_mm256_set1_epi32(-1))
    );

    /// The table indices `(o₀·s₀ + o₁)·s₁ + o₂` of eight lanes' whole
    /// offsets `o` (wrapping i32 arithmetic) and the lanes, all ones, whose
    /// index lies in `0..len`: the index of [`Num::gather`] on `F32x8` and
    /// on AVX-512's `F64x8` (eight i32 indices too).
    #[inline(always)]
    pub(crate) fn table_index8(o: [__m256i; 3], s0: i32, s1: i32, len: i32) -> (__m256i, __m256i) {
        intrinsics! {
            let idx = _mm256_add_epi32(
                _mm256_mullo_epi32(
                    _mm256_add_epi32(_mm256_mullo_epi32(o[0], _mm256_set1_epi32(s0)), o[1]),
                    _mm256_set1_epi32(s1),
                ),
                o[2],
            );
            let inside = _mm256_and_si256(
                _mm256_cmpgt_epi32(idx, _mm256_set1_epi32(-1)),
                _mm256_cmpgt_epi32(_mm256_set1_epi32(len), idx),
            );
            (idx, inside)
        }
    }

    impl Mask for M64x4 {
        const LANES: usize = 4;
        #[inline(always)]
        fn splat(b: bool) -> Self {
            intrinsics! { M64x4(_mm256_castsi256_pd(_mm256_set1_epi64x(-(b as i64)))) }
        }
        #[inline(always)]
        fn any(self) -> bool {
            intrinsics! { _mm256_movemask_pd(self.0) != 0 }
        }
        #[inline(always)]
        fn all(self) -> bool {
            intrinsics! { _mm256_movemask_pd(self.0) == 0xf }
        }
        #[inline(always)]
        fn bits(self) -> u32 {
            intrinsics! { _mm256_movemask_pd(self.0) as u32 }
        }
        #[inline(always)]
        fn from_bits(bits: u32) -> Self {
            intrinsics! {
                let sel = _mm256_setr_epi64x(1, 2, 4, 8);
                let b = _mm256_and_si256(_mm256_set1_epi64x(bits as i64), sel);
                M64x4(_mm256_castsi256_pd(_mm256_cmpeq_epi64(b, sel)))
            }
        }
    }

    impl Mask for M32x8 {
        const LANES: usize = 8;
        #[inline(always)]
        fn splat(b: bool) -> Self {
            intrinsics! { M32x8(_mm256_castsi256_ps(_mm256_set1_epi32(-(b as i32)))) }
        }
        #[inline(always)]
        fn any(self) -> bool {
            intrinsics! { _mm256_movemask_ps(self.0) != 0 }
        }
        #[inline(always)]
        fn all(self) -> bool {
            intrinsics! { _mm256_movemask_ps(self.0) == 0xff }
        }
        #[inline(always)]
        fn bits(self) -> u32 {
            intrinsics! { _mm256_movemask_ps(self.0) as u32 }
        }
        #[inline(always)]
        fn from_bits(bits: u32) -> Self {
            intrinsics! {
                let sel = _mm256_setr_epi32(1, 2, 4, 8, 16, 32, 64, 128);
                let b = _mm256_and_si256(_mm256_set1_epi32(bits as i32), sel);
                M32x8(_mm256_castsi256_ps(_mm256_cmpeq_epi32(b, sel)))
            }
        }
    }

    impl F64x4 {
        #[inline(always)]
        fn to_array(self) -> [f64; 4] {
            // SAFETY: same size (32 bytes), and every bit pattern is a valid f64.
            unsafe { std::mem::transmute::<__m256d, [f64; 4]>(self.0) }
        }
        #[inline(always)]
        fn map(self, f: impl Fn(f64) -> f64) -> Self {
            let a = self.to_array();
            Self::from_fn(|i| f(a[i]))
        }
    }

    impl F32x8 {
        #[inline(always)]
        fn to_array(self) -> [f32; 8] {
            // SAFETY: same size (32 bytes), and every bit pattern is a valid f32.
            unsafe { std::mem::transmute::<__m256, [f32; 8]>(self.0) }
        }
        #[inline(always)]
        fn map(self, f: impl Fn(f32) -> f32) -> Self {
            let a = self.to_array();
            Self::from_fn(|i| f(a[i]))
        }
    }

    impl std::ops::Neg for F64x4 {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            intrinsics! { F64x4(_mm256_xor_pd(self.0, _mm256_set1_pd(-0.0))) }
        }
    }

    impl std::ops::Neg for F32x8 {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            intrinsics! { F32x8(_mm256_xor_ps(self.0, _mm256_set1_ps(-0.0))) }
        }
    }

    impl Num for F64x4 {
        type Scalar = f64;
        type Mask = M64x4;
        const LANES: usize = 4;

        #[inline(always)]
        fn splat(x: f64) -> Self {
            intrinsics! { F64x4(_mm256_set1_pd(x)) }
        }
        #[inline(always)]
        fn from_fn(mut f: impl FnMut(usize) -> f64) -> Self {
            let a = [f(0), f(1), f(2), f(3)];
            // SAFETY: an unaligned load of the 4 values of `a`; AVX is enabled
            // wherever an `F64x4` is built (module docs).
            unsafe { F64x4(_mm256_loadu_pd(a.as_ptr())) }
        }
        #[inline(always)]
        fn lane(self, i: usize) -> f64 {
            self.to_array()[i]
        }
        #[inline(always)]
        fn c(x: f64) -> Self {
            Self::splat(x)
        }
        lanewise_libm!(f64);
        #[inline(always)]
        fn sqrt(self) -> Self {
            intrinsics! { F64x4(_mm256_sqrt_pd(self.0)) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            intrinsics! { F64x4(_mm256_andnot_pd(_mm256_set1_pd(-0.0), self.0)) }
        }
        #[inline(always)]
        fn floor(self) -> Self {
            intrinsics! {
                F64x4(_mm256_round_pd::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn ceil(self) -> Self {
            intrinsics! {
                F64x4(_mm256_round_pd::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn round(self) -> Self {
            intrinsics! {
                F64x4(_mm256_round_pd::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            intrinsics! { F64x4(_mm256_fmadd_pd(self.0, a.0, b.0)) }
        }
        #[inline(always)]
        fn cmp_eq(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_EQ_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ne(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_NEQ_UQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_lt(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_LT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_le(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_LE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_gt(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_GT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ge(self, o: Self) -> M64x4 {
            intrinsics! { M64x4(_mm256_cmp_pd::<_CMP_GE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn select(m: M64x4, t: Self, f: Self) -> Self {
            intrinsics! { F64x4(_mm256_blendv_pd(f.0, t.0, m.0)) }
        }
        #[inline(always)]
        fn negate_if_odd(self, k: Self) -> Self {
            // k + 1.5 * 2^52 holds k in its low mantissa bits: bit 0 is the parity
            intrinsics! {
                let bits =
                    _mm256_castpd_si256(_mm256_add_pd(k.0, _mm256_set1_pd(6755399441055744.0)));
                let sign = _mm256_slli_epi64::<63>(bits);
                F64x4(_mm256_xor_pd(self.0, _mm256_castsi256_pd(sign)))
            }
        }
        #[inline(always)]
        fn mul_pow2(self, n: Self) -> Self {
            intrinsics! {
                let bits =
                    _mm256_castpd_si256(_mm256_add_pd(n.0, _mm256_set1_pd(6755399441055744.0)));
                // bits = 0x4338000000000000 + n
                let e = _mm256_add_epi64(bits, _mm256_set1_epi64x(1023 - 0x4338000000000000));
                F64x4(_mm256_mul_pd(self.0, _mm256_castsi256_pd(_mm256_slli_epi64::<52>(e))))
            }
        }
        #[inline(always)]
        fn gather(
            table: &[f64],
            [a, b, c]: [Self; 3],
            strides: [usize; 2],
            m: M64x4,
            otherwise: Self,
        ) -> Self {
            let Some((s0, s1, len)) = super::gather_dims(table, strides) else {
                return gather_lanes(table, [a, b, c], strides, m, otherwise);
            };
            let (idx, read) = intrinsics! {
                let o = [a, b, c].map(|x| _mm256_cvttpd_epi32(x.0));
                let idx = _mm_add_epi32(
                    _mm_mullo_epi32(
                        _mm_add_epi32(_mm_mullo_epi32(o[0], _mm_set1_epi32(s0)), o[1]),
                        _mm_set1_epi32(s1),
                    ),
                    o[2],
                );
                let inside = _mm_and_si128(
                    _mm_cmpgt_epi32(idx, _mm_set1_epi32(-1)),
                    _mm_cmpgt_epi32(_mm_set1_epi32(len), idx),
                );
                (idx, _mm256_and_pd(m.0, _mm256_castsi256_pd(_mm256_cvtepi32_epi64(inside))))
            };
            // SAFETY: the lanes of `read` hold indices in 0..table.len()
            // (checked above); the others are not read. AVX2 is enabled
            // wherever an `F64x4` exists (module docs).
            unsafe { F64x4(_mm256_mask_i32gather_pd::<8>(otherwise.0, table.as_ptr(), idx, read)) }
        }
        #[inline(always)]
        fn write_f32(self, out: &mut [f32]) {
            assert!(out.len() >= 4);
            // SAFETY: an unaligned store of 4 values; `out` holds at least 4
            // (asserted); AVX is enabled wherever an `F64x4` exists.
            unsafe { _mm_storeu_ps(out.as_mut_ptr(), _mm256_cvtpd_ps(self.0)) }
        }
    }

    impl Num for F32x8 {
        type Scalar = f32;
        type Mask = M32x8;
        const LANES: usize = 8;

        #[inline(always)]
        fn splat(x: f32) -> Self {
            intrinsics! { F32x8(_mm256_set1_ps(x)) }
        }
        #[inline(always)]
        fn from_fn(mut f: impl FnMut(usize) -> f32) -> Self {
            let a = [f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)];
            // SAFETY: an unaligned load of the 8 values of `a`; AVX is enabled
            // wherever an `F32x8` is built (module docs).
            unsafe { F32x8(_mm256_loadu_ps(a.as_ptr())) }
        }
        #[inline(always)]
        fn lane(self, i: usize) -> f32 {
            self.to_array()[i]
        }
        #[inline(always)]
        fn c(x: f64) -> Self {
            Self::splat(x as f32)
        }
        lanewise_libm!(f32);
        #[inline(always)]
        fn sqrt(self) -> Self {
            intrinsics! { F32x8(_mm256_sqrt_ps(self.0)) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            intrinsics! { F32x8(_mm256_andnot_ps(_mm256_set1_ps(-0.0), self.0)) }
        }
        #[inline(always)]
        fn floor(self) -> Self {
            intrinsics! {
                F32x8(_mm256_round_ps::<{ _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn ceil(self) -> Self {
            intrinsics! {
                F32x8(_mm256_round_ps::<{ _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn round(self) -> Self {
            intrinsics! {
                F32x8(_mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(self.0))
            }
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            intrinsics! { F32x8(_mm256_fmadd_ps(self.0, a.0, b.0)) }
        }
        #[inline(always)]
        fn cmp_eq(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_EQ_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ne(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_NEQ_UQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_lt(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_LT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_le(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_LE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_gt(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_GT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ge(self, o: Self) -> M32x8 {
            intrinsics! { M32x8(_mm256_cmp_ps::<_CMP_GE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn select(m: M32x8, t: Self, f: Self) -> Self {
            intrinsics! { F32x8(_mm256_blendv_ps(f.0, t.0, m.0)) }
        }
        #[inline(always)]
        fn negate_if_odd(self, k: Self) -> Self {
            // k + 1.5 * 2^23 holds k in its low mantissa bits: bit 0 is the parity
            intrinsics! {
                let bits = _mm256_castps_si256(_mm256_add_ps(k.0, _mm256_set1_ps(12582912.0)));
                let sign = _mm256_slli_epi32::<31>(bits);
                F32x8(_mm256_xor_ps(self.0, _mm256_castsi256_ps(sign)))
            }
        }
        #[inline(always)]
        fn mul_pow2(self, n: Self) -> Self {
            intrinsics! {
                let bits = _mm256_castps_si256(_mm256_add_ps(n.0, _mm256_set1_ps(12582912.0)));
                // bits = 0x4B400000 + n
                let e = _mm256_add_epi32(bits, _mm256_set1_epi32(127 - 0x4B40_0000));
                F32x8(_mm256_mul_ps(self.0, _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))))
            }
        }
        #[inline(always)]
        fn gather(
            table: &[f64],
            [a, b, c]: [Self; 3],
            strides: [usize; 2],
            m: M32x8,
            otherwise: Self,
        ) -> Self {
            let Some((s0, s1, len)) = super::gather_dims(table, strides) else {
                return gather_lanes(table, [a, b, c], strides, m, otherwise);
            };
            let (idx, read) = intrinsics! {
                let (idx, inside) =
                    table_index8([a, b, c].map(|x| _mm256_cvttps_epi32(x.0)), s0, s1, len);
                (idx, _mm256_and_si256(_mm256_castps_si256(m.0), inside))
            };
            // the table is f64: two gathers of four, each rounded to f32
            let half = |idx: __m128i, read: __m128i| {
                // SAFETY: the lanes of `read` hold indices in
                // 0..table.len() (checked above); the others are not read.
                // AVX2 is enabled wherever an `F32x8` exists (module docs).
                unsafe {
                    let read = _mm256_castsi256_pd(_mm256_cvtepi32_epi64(read));
                    let x = _mm256_setzero_pd();
                    _mm256_cvtpd_ps(_mm256_mask_i32gather_pd::<8>(x, table.as_ptr(), idx, read))
                }
            };
            intrinsics! {
                let lo = half(_mm256_castsi256_si128(idx), _mm256_castsi256_si128(read));
                let hi = half(
                    _mm256_extracti128_si256::<1>(idx),
                    _mm256_extracti128_si256::<1>(read),
                );
                F32x8(_mm256_blendv_ps(otherwise.0, _mm256_set_m128(hi, lo), _mm256_castsi256_ps(read)))
            }
        }
        #[inline(always)]
        fn write_f32(self, out: &mut [f32]) {
            assert!(out.len() >= 8);
            // SAFETY: an unaligned store of 8 values; `out` holds at least 8
            // (asserted); AVX is enabled wherever an `F32x8` exists.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), self.0) }
        }
    }
}

/// AVX-512F vectors: [`avx512::F64x8`] and [`avx512::F32x16`].
pub(crate) mod avx512 {
    use crate::real::{gather_lanes, Mask, Num};
    use std::arch::x86_64::*;

    /// Eight f64 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct F64x8(__m512d);
    /// Sixteen f32 lanes.
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct F32x16(__m512);
    /// Mask of [`F64x8`] (one bit per lane).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct M8(u8);
    /// Mask of [`F32x16`] (one bit per lane).
    #[derive(Clone, Copy, Debug)]
    pub(crate) struct M16(u16);

    ops!(F64x8, _mm512_add_pd, _mm512_sub_pd, _mm512_mul_pd, _mm512_div_pd);
    ops!(F32x16, _mm512_add_ps, _mm512_sub_ps, _mm512_mul_ps, _mm512_div_ps);
    bit_mask_ops!(M8);
    bit_mask_ops!(M16);

    impl Mask for M8 {
        const LANES: usize = 8;
        #[inline(always)]
        fn splat(b: bool) -> Self {
            M8(if b { 0xff } else { 0 })
        }
        #[inline(always)]
        fn any(self) -> bool {
            self.0 != 0
        }
        #[inline(always)]
        fn all(self) -> bool {
            self.0 == 0xff
        }
        #[inline(always)]
        fn bits(self) -> u32 {
            self.0 as u32
        }
        #[inline(always)]
        fn from_bits(bits: u32) -> Self {
            M8(bits as u8)
        }
    }

    impl Mask for M16 {
        const LANES: usize = 16;
        #[inline(always)]
        fn splat(b: bool) -> Self {
            M16(if b { 0xffff } else { 0 })
        }
        #[inline(always)]
        fn any(self) -> bool {
            self.0 != 0
        }
        #[inline(always)]
        fn all(self) -> bool {
            self.0 == 0xffff
        }
        #[inline(always)]
        fn bits(self) -> u32 {
            self.0 as u32
        }
        #[inline(always)]
        fn from_bits(bits: u32) -> Self {
            M16(bits as u16)
        }
    }

    impl F64x8 {
        #[inline(always)]
        fn to_array(self) -> [f64; 8] {
            // SAFETY: same size (64 bytes), and every bit pattern is a valid f64.
            unsafe { std::mem::transmute::<__m512d, [f64; 8]>(self.0) }
        }
        #[inline(always)]
        fn map(self, f: impl Fn(f64) -> f64) -> Self {
            let a = self.to_array();
            Self::from_fn(|i| f(a[i]))
        }
        #[inline(always)]
        fn xor_bits(self, bits: __m512i) -> Self {
            intrinsics! {
                F64x8(_mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(self.0), bits)))
            }
        }
    }

    impl F32x16 {
        #[inline(always)]
        fn to_array(self) -> [f32; 16] {
            // SAFETY: same size (64 bytes), and every bit pattern is a valid f32.
            unsafe { std::mem::transmute::<__m512, [f32; 16]>(self.0) }
        }
        #[inline(always)]
        fn map(self, f: impl Fn(f32) -> f32) -> Self {
            let a = self.to_array();
            Self::from_fn(|i| f(a[i]))
        }
        #[inline(always)]
        fn xor_bits(self, bits: __m512i) -> Self {
            intrinsics! {
                F32x16(_mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(self.0), bits)))
            }
        }
    }

    impl std::ops::Neg for F64x8 {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            intrinsics! { self.xor_bits(_mm512_set1_epi64(i64::MIN)) }
        }
    }

    impl std::ops::Neg for F32x16 {
        type Output = Self;
        #[inline(always)]
        fn neg(self) -> Self {
            intrinsics! { self.xor_bits(_mm512_set1_epi32(i32::MIN)) }
        }
    }

    const FLOOR: i32 = _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC;
    const CEIL: i32 = _MM_FROUND_TO_POS_INF | _MM_FROUND_NO_EXC;
    const NEAREST: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

    impl Num for F64x8 {
        type Scalar = f64;
        type Mask = M8;
        const LANES: usize = 8;

        #[inline(always)]
        fn splat(x: f64) -> Self {
            intrinsics! { F64x8(_mm512_set1_pd(x)) }
        }
        #[inline(always)]
        fn from_fn(mut f: impl FnMut(usize) -> f64) -> Self {
            let a = [f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7)];
            // SAFETY: an unaligned load of the 8 values of `a`; AVX-512F is
            // enabled wherever an `F64x8` is built (module docs).
            unsafe { F64x8(_mm512_loadu_pd(a.as_ptr())) }
        }
        #[inline(always)]
        fn lane(self, i: usize) -> f64 {
            self.to_array()[i]
        }
        #[inline(always)]
        fn c(x: f64) -> Self {
            Self::splat(x)
        }
        lanewise_libm!(f64);
        #[inline(always)]
        fn sqrt(self) -> Self {
            intrinsics! { F64x8(_mm512_sqrt_pd(self.0)) }
        }
        /// The estimate of 1/√x (relative error below 2⁻¹⁴) refined by two
        /// Newton steps (to about an ulp), then √x = x·(1/√x) and 1/√x each
        /// corrected once by their residual, which FMA takes exactly: within
        /// an ulp of the correctly rounded numbers, on the FMA ports (the
        /// divider's square root and division take a zmm register each
        /// 16 cycles or more, and a pixel's geometry waits on both).
        #[inline(always)]
        fn sqrt_recip(self) -> (Self, Self) {
            intrinsics! {
                let x = self.0;
                let half = _mm512_set1_pd(0.5);
                let h = _mm512_mul_pd(half, x);
                let mut y = _mm512_rsqrt14_pd(x);
                for _ in 0..2 {
                    // y + y (1/2 - (x/2) y²)
                    let e = _mm512_fnmadd_pd(_mm512_mul_pd(h, y), y, half);
                    y = _mm512_fmadd_pd(y, e, y);
                }
                let r0 = _mm512_mul_pd(x, y);
                let r = _mm512_fmadd_pd(_mm512_mul_pd(half, y), _mm512_fnmadd_pd(r0, r0, x), r0);
                let inv = _mm512_fmadd_pd(y, _mm512_fnmadd_pd(r, y, _mm512_set1_pd(1.0)), y);
                (F64x8(r), F64x8(inv))
            }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            intrinsics! { F64x8(_mm512_abs_pd(self.0)) }
        }
        #[inline(always)]
        fn floor(self) -> Self {
            intrinsics! { F64x8(_mm512_roundscale_pd::<FLOOR>(self.0)) }
        }
        #[inline(always)]
        fn ceil(self) -> Self {
            intrinsics! { F64x8(_mm512_roundscale_pd::<CEIL>(self.0)) }
        }
        #[inline(always)]
        fn round(self) -> Self {
            intrinsics! { F64x8(_mm512_roundscale_pd::<NEAREST>(self.0)) }
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            intrinsics! { F64x8(_mm512_fmadd_pd(self.0, a.0, b.0)) }
        }
        #[inline(always)]
        fn cmp_eq(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ne(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_NEQ_UQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_lt(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_LT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_le(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_LE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_gt(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_GT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ge(self, o: Self) -> M8 {
            intrinsics! { M8(_mm512_cmp_pd_mask::<_CMP_GE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn select(m: M8, t: Self, f: Self) -> Self {
            intrinsics! { F64x8(_mm512_mask_blend_pd(m.0, f.0, t.0)) }
        }
        #[inline(always)]
        fn negate_if_odd(self, k: Self) -> Self {
            intrinsics! {
                let bits =
                    _mm512_castpd_si512(_mm512_add_pd(k.0, _mm512_set1_pd(6755399441055744.0)));
                self.xor_bits(_mm512_slli_epi64::<63>(bits))
            }
        }
        #[inline(always)]
        fn mul_pow2(self, n: Self) -> Self {
            intrinsics! { F64x8(_mm512_scalef_pd(self.0, n.0)) }
        }
        #[inline(always)]
        fn gather(
            table: &[f64],
            [a, b, c]: [Self; 3],
            strides: [usize; 2],
            m: M8,
            otherwise: Self,
        ) -> Self {
            let Some((s0, s1, len)) = super::gather_dims(table, strides) else {
                return gather_lanes(table, [a, b, c], strides, m, otherwise);
            };
            let (idx, read) = intrinsics! {
                let o = [a, b, c].map(|x| _mm512_cvttpd_epi32(x.0));
                let (idx, inside) = super::avx2::table_index8(o, s0, s1, len);
                (idx, m.0 & _mm256_movemask_ps(_mm256_castsi256_ps(inside)) as u8)
            };
            // SAFETY: the lanes of `read` hold indices in 0..table.len()
            // (checked above); the others are not read. AVX-512F and AVX2
            // are enabled wherever an `F64x8` exists (module docs).
            unsafe { F64x8(_mm512_mask_i32gather_pd::<8>(otherwise.0, read, idx, table.as_ptr())) }
        }
        #[inline(always)]
        fn write_f32(self, out: &mut [f32]) {
            assert!(out.len() >= 8);
            // SAFETY: an unaligned store of 8 values; `out` holds at least 8
            // (asserted); AVX-512F is enabled wherever an `F64x8` exists.
            unsafe { _mm256_storeu_ps(out.as_mut_ptr(), _mm512_cvtpd_ps(self.0)) }
        }
    }

    impl Num for F32x16 {
        type Scalar = f32;
        type Mask = M16;
        const LANES: usize = 16;

        #[inline(always)]
        fn splat(x: f32) -> Self {
            intrinsics! { F32x16(_mm512_set1_ps(x)) }
        }
        #[inline(always)]
        fn from_fn(mut f: impl FnMut(usize) -> f32) -> Self {
            // written out, as the other widths are: a loop kept the lanes'
            // calls apart, and a structure-factor lookup then stored the
            // vectors of h, k and l once per lane instead of once (f32 with
            // an -hkl table ran at a third of f64's speed on AVX-512)
            #[rustfmt::skip]
            let a = [
                f(0), f(1), f(2), f(3), f(4), f(5), f(6), f(7),
                f(8), f(9), f(10), f(11), f(12), f(13), f(14), f(15),
            ];
            // SAFETY: an unaligned load of the 16 values of `a`; AVX-512F is
            // enabled wherever an `F32x16` is built (module docs).
            unsafe { F32x16(_mm512_loadu_ps(a.as_ptr())) }
        }
        #[inline(always)]
        fn lane(self, i: usize) -> f32 {
            self.to_array()[i]
        }
        #[inline(always)]
        fn c(x: f64) -> Self {
            Self::splat(x as f32)
        }
        lanewise_libm!(f32);
        #[inline(always)]
        fn sqrt(self) -> Self {
            intrinsics! { F32x16(_mm512_sqrt_ps(self.0)) }
        }
        #[inline(always)]
        fn abs(self) -> Self {
            intrinsics! { F32x16(_mm512_abs_ps(self.0)) }
        }
        #[inline(always)]
        fn floor(self) -> Self {
            intrinsics! { F32x16(_mm512_roundscale_ps::<FLOOR>(self.0)) }
        }
        #[inline(always)]
        fn ceil(self) -> Self {
            intrinsics! { F32x16(_mm512_roundscale_ps::<CEIL>(self.0)) }
        }
        #[inline(always)]
        fn round(self) -> Self {
            intrinsics! { F32x16(_mm512_roundscale_ps::<NEAREST>(self.0)) }
        }
        #[inline(always)]
        fn mul_add(self, a: Self, b: Self) -> Self {
            intrinsics! { F32x16(_mm512_fmadd_ps(self.0, a.0, b.0)) }
        }
        #[inline(always)]
        fn cmp_eq(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ne(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_NEQ_UQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_lt(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_le(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_LE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_gt(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_GT_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn cmp_ge(self, o: Self) -> M16 {
            intrinsics! { M16(_mm512_cmp_ps_mask::<_CMP_GE_OQ>(self.0, o.0)) }
        }
        #[inline(always)]
        fn select(m: M16, t: Self, f: Self) -> Self {
            intrinsics! { F32x16(_mm512_mask_blend_ps(m.0, f.0, t.0)) }
        }
        #[inline(always)]
        fn negate_if_odd(self, k: Self) -> Self {
            intrinsics! {
                let bits = _mm512_castps_si512(_mm512_add_ps(k.0, _mm512_set1_ps(12582912.0)));
                self.xor_bits(_mm512_slli_epi32::<31>(bits))
            }
        }
        #[inline(always)]
        fn mul_pow2(self, n: Self) -> Self {
            intrinsics! { F32x16(_mm512_scalef_ps(self.0, n.0)) }
        }
        #[inline(always)]
        fn gather(
            table: &[f64],
            [a, b, c]: [Self; 3],
            strides: [usize; 2],
            m: M16,
            otherwise: Self,
        ) -> Self {
            let Some((s0, s1, len)) = super::gather_dims(table, strides) else {
                return gather_lanes(table, [a, b, c], strides, m, otherwise);
            };
            let (idx, read) = intrinsics! {
                let o = [a, b, c].map(|x| _mm512_cvttps_epi32(x.0));
                let idx = _mm512_add_epi32(
                    _mm512_mullo_epi32(
                        _mm512_add_epi32(_mm512_mullo_epi32(o[0], _mm512_set1_epi32(s0)), o[1]),
                        _mm512_set1_epi32(s1),
                    ),
                    o[2],
                );
                // unsigned: a negative index is above any length
                (idx, m.0 & _mm512_cmplt_epu32_mask(idx, _mm512_set1_epi32(len)))
            };
            // the table is f64: two gathers of eight, each rounded to f32
            // SAFETY: the lanes of `read` hold indices in 0..table.len()
            // (checked above); the others are not read. AVX-512F is enabled
            // wherever an `F32x16` exists (module docs).
            let (lo, hi) = unsafe {
                let x = _mm512_setzero_pd();
                let p = table.as_ptr();
                (
                    _mm512_mask_i32gather_pd::<8>(x, read as u8, _mm512_castsi512_si256(idx), p),
                    _mm512_mask_i32gather_pd::<8>(
                        x,
                        (read >> 8) as u8,
                        _mm512_extracti64x4_epi64::<1>(idx),
                        p,
                    ),
                )
            };
            intrinsics! {
                let lo = _mm512_castps256_ps512(_mm512_cvtpd_ps(lo));
                let both = _mm512_insertf64x4::<1>(
                    _mm512_castps_pd(lo),
                    _mm256_castps_pd(_mm512_cvtpd_ps(hi)),
                );
                F32x16(_mm512_mask_blend_ps(read, otherwise.0, _mm512_castpd_ps(both)))
            }
        }
        #[inline(always)]
        fn write_f32(self, out: &mut [f32]) {
            assert!(out.len() >= 16);
            // SAFETY: an unaligned store of 16 values; `out` holds at least 16
            // (asserted); AVX-512F is enabled wherever an `F32x16` exists.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr(), self.0) }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{avx2, avx512};
    use crate::real::{fast, Mask, Num, Real, X2};

    /// Every lane of `V` must compute what its scalar type computes.
    fn check<V: Num>() {
        let vals: Vec<f64> = vec![
            -3.5,
            -2.5,
            -1.0,
            -0.7,
            -0.5,
            -0.0,
            0.0,
            0.3,
            0.5,
            1.5,
            2.5,
            7.0,
            1e-300,
            -1e10,
            123.456,
            f64::NAN,
            0.25,
            -0.25,
            3.0,
            4.0,
            2.0,
            -2.0,
            9.75,
            1e-8,
            -5.5,
            6.5,
            1.0,
            11.0,
            0.125,
            -0.125,
            100.0,
            33.0,
        ];
        let s = |x: f64| V::Scalar::c(x);
        let at = |off: usize| V::from_fn(|i| s(vals[(i + off) % vals.len()]));
        for off in 0..vals.len() {
            let (a, b) = (at(off), at(off + 3));
            let k = V::from_fn(|i| s((i as f64 + off as f64) - 7.0));
            let same = |x: V, y: &dyn Fn(usize) -> V::Scalar, what: &str| {
                for i in 0..V::LANES {
                    let (p, q) = (x.lane(i), y(i));
                    assert!(
                        p.val().to_bits() == q.val().to_bits()
                            || (p.val().is_nan() && q.val().is_nan()),
                        "{what} lane {i}: {p:?} vs {q:?}"
                    );
                }
            };
            let (la, lb, lk) = (|i| a.lane(i), |i| b.lane(i), |i| k.lane(i));
            same(a + b, &|i| la(i) + lb(i), "add");
            same(a - b, &|i| la(i) - lb(i), "sub");
            same(a * b, &|i| la(i) * lb(i), "mul");
            same(a / b, &|i| la(i) / lb(i), "div");
            same(-a, &|i| -la(i), "neg");
            same(a.abs().sqrt(), &|i| la(i).abs().sqrt(), "sqrt");
            same(a.floor(), &|i| la(i).floor(), "floor");
            same(a.ceil(), &|i| la(i).ceil(), "ceil");
            same(a.round(), &|i| Num::round(la(i)), "round");
            same(a.sin(), &|i| la(i).sin(), "sin");
            same(a.atan2(b), &|i| la(i).atan2(lb(i)), "atan2");
            same(a.negate_if_odd(k), &|i| la(i).negate_if_odd(lk(i)), "negate_if_odd");
            let small = V::from_fn(|i| s((i as f64 + off as f64) % 40.0 - 20.0));
            same(a.mul_pow2(small), &|i| la(i).mul_pow2(small.lane(i)), "mul_pow2");
            // fused on SIMD types, a plain multiply-add on scalars
            let fused = a.mul_add(b, k);
            for i in 0..V::LANES {
                let want = la(i).val().mul_add(lb(i).val(), lk(i).val());
                let plain = (la(i) * lb(i) + lk(i)).val();
                let got = fused.lane(i).val();
                assert!(
                    got == want as f32 as f64
                        || got == want
                        || got == plain
                        || (got.is_nan() && want.is_nan()),
                    "mul_add lane {i}: {got} vs {want}"
                );
            }
            for (m, f) in [
                (a.cmp_eq(b), &(|x: f64, y: f64| x == y) as &dyn Fn(f64, f64) -> bool),
                (a.cmp_ne(b), &|x, y| x != y),
                (a.cmp_lt(b), &|x, y| x < y),
                (a.cmp_le(b), &|x, y| x <= y),
                (a.cmp_gt(b), &|x, y| x > y),
                (a.cmp_ge(b), &|x, y| x >= y),
            ] {
                for i in 0..V::LANES {
                    assert_eq!(m.bits() >> i & 1 != 0, f(la(i).val(), lb(i).val()), "cmp lane {i}");
                }
                assert_eq!(V::Mask::from_bits(m.bits()).bits(), m.bits());
                assert_eq!(m.any(), m.bits() != 0);
                assert_eq!((!m).bits() | m.bits(), V::Mask::splat(true).bits());
                let sel = V::select(m, a, b);
                same(sel, &|i| if m.bits() >> i & 1 != 0 { la(i) } else { lb(i) }, "select");
            }
            let mut out = vec![0.0f32; V::LANES];
            a.write_f32(&mut out);
            for (i, o) in out.iter().enumerate() {
                assert!(o.to_bits() == (la(i).val() as f32).to_bits() || o.is_nan());
            }
            // a gather reads what the lanes read one by one, rounded alike:
            // inside the table, past its end (whole offsets too large) and
            // in lanes outside the mask (NaN offsets)
            let table: Vec<f64> = (0..5 * 6 * 7).map(|j| 1.0 + j as f64 * 1.000_000_3).collect();
            let mut state = 0x2545_f491_4f6c_dd1du64 ^ off as u64;
            let mut next = |n: u64| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state % n
            };
            for _ in 0..50 {
                let offsets: [V; 3] = std::array::from_fn(|_| {
                    V::from_fn(|_| match next(10) {
                        0 => s(f64::NAN),
                        1 => s(6.0),
                        _ => s(next(5) as f64),
                    })
                });
                let m = V::Mask::from_bits(next(1 << 16) as u32);
                let nan =
                    (0..V::LANES).filter(|&i| offsets.iter().any(|o| o.lane(i).val().is_nan()));
                let m = V::Mask::from_bits(nan.fold(m.bits(), |b, i| b & !(1 << i)));
                let got = V::gather(&table, offsets, [6, 7], m, a);
                let want = crate::real::gather_lanes(&table, offsets, [6, 7], m, a);
                same(got, &|i| want.lane(i), "gather");
            }
            // the fast functions give the same lanes as on scalars, up to fusing
            let t = V::from_fn(|i| s(((i + off) as f64 * 0.37) % 3.0 - 1.5));
            let sp = fast::sinpi(t);
            for i in 0..V::LANES {
                let want = fast::sinpi(t.lane(i)).val();
                assert!((sp.lane(i).val() - want).abs() < 1e-6, "sinpi lane {i}");
            }
        }
    }

    #[test]
    fn avx2_lanes_match_scalars() {
        if !(is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")) {
            return;
        }
        check::<avx2::F64x4>();
        check::<avx2::F32x8>();
        check::<X2<avx2::F64x4>>();
        check::<X2<avx2::F32x8>>();
    }

    #[test]
    fn avx512_lanes_match_scalars() {
        if !is_x86_feature_detected!("avx512f") {
            return;
        }
        check::<avx512::F64x8>();
        check::<avx512::F32x16>();
        check::<X2<avx512::F32x16>>();
    }

    /// `sqrt_recip` of `V` within an ulp of the correctly rounded √x and
    /// 1/√x over positive normal numbers of every magnitude the kernels see
    /// and far beyond.
    fn sqrt_recip_within_an_ulp<V: Num<Scalar = f64>>() {
        let ulps = |got: f64, want: f64| (got.to_bits() as i64 - want.to_bits() as i64).abs();
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let mut worst = [0i64; 2];
        for _ in 0..100_000 {
            let x = V::from_fn(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                // significand from the high bits, exponent over ±2⁻³⁰⁰..2³⁰⁰
                let m = 1.0 + (state >> 11) as f64 / (1u64 << 53) as f64;
                m * 2f64.powi((state % 601) as i32 - 300)
            });
            let (r, inv) = x.sqrt_recip();
            for i in 0..V::LANES {
                let want = x.lane(i).sqrt();
                worst[0] = worst[0].max(ulps(r.lane(i), want));
                worst[1] = worst[1].max(ulps(inv.lane(i), 1.0 / want));
            }
        }
        assert!(worst[0] <= 1 && worst[1] <= 1, "worst ulps {worst:?}");
    }

    #[test]
    fn sqrt_recip_is_within_an_ulp() {
        sqrt_recip_within_an_ulp::<f64>();
        sqrt_recip_within_an_ulp::<X2<f64>>();
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            sqrt_recip_within_an_ulp::<avx2::F64x4>();
        }
        if is_x86_feature_detected!("avx512f") {
            sqrt_recip_within_an_ulp::<avx512::F64x8>();
            sqrt_recip_within_an_ulp::<X2<avx512::F64x8>>();
        }
    }

    #[test]
    fn portable_bundles_match_scalars() {
        check::<X2<f64>>();
        check::<X2<X2<X2<f32>>>>();
    }
}
