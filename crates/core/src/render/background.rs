//! The amorphous background (`-stol`) added to a rendered row: the C-bit sum
//! of [`Background::pixel`] in the exact render, the lanes of
//! [`FastBackground`] (compiled for this CPU's SIMD level) in the fast ones.

use super::cpu::SimdLevel;
use super::rows::{roi_row, roi_row_of, Pixel};
use crate::amorphous::fast::FastBackground;
use crate::amorphous::{AmorphousImage, Background};
use crate::real::{Mask, Num};
use crate::setup::Plan;

/// The background as a render adds it: nonBragg's sum, or its fast form.
/// Made before the rows are rendered, so that the fast form's tables are
/// built once, outside the parallel rows.
#[derive(Clone, Copy)]
pub(crate) struct RowBackground<'a> {
    bg: &'a Background,
    lanes: Option<&'a FastBackground>,
}

impl<'a> RowBackground<'a> {
    /// `bg` as a render adds it: with `fast`, its fast form where it has one.
    pub(crate) fn new(bg: &'a Background, fast: bool) -> Self {
        RowBackground { bg, lanes: fast.then(|| bg.fast()).flatten() }
    }

    /// Adds the background to the pixels of row `s` inside the ROI and not
    /// masked.
    pub(crate) fn add_row<T: Pixel>(self, plan: &Plan, s: usize, row: &mut [T]) {
        let Some((lo, hi)) = roi_row(plan, s) else { return };
        let fp = plan.detector.fpixels;
        let mask = plan.mask.as_deref().map(|m| &m[s * fp..(s + 1) * fp]);
        let target = Row { bg: self.bg, s, lo, hi, mask };
        match self.lanes {
            Some(lanes) => _ = target.add_fast(lanes, row),
            None => _ = target.add_exact(row),
        }
    }

    /// The background in pixel `[f, s]` as [`Self::add_row`] adds it.
    pub(crate) fn pixel(self, f: usize, s: usize) -> f64 {
        if let Some(lanes) = self.lanes {
            let (v, _, beyond) = lanes.lanes::<f64>(f, s);
            if !beyond {
                return v;
            }
        }
        self.bg.pixel(f, s, &mut 0.0)
    }
}

/// The pixels `lo..=hi` of row `s` that take the background.
struct Row<'a> {
    bg: &'a Background,
    s: usize,
    lo: usize,
    hi: usize,
    mask: Option<&'a [u16]>,
}

impl Row<'_> {
    /// Returns the sum of the solid angles of the pixels it added to (as
    /// nonBragg sums them, for its total).
    fn add_exact<T: Pixel>(&self, row: &mut [T]) -> f64 {
        // the background's own solid-angle sum is not the render's
        let mut omega = 0.0;
        for f in self.lo..=self.hi {
            if self.mask.is_none_or(|m| m[f] != 0) {
                row[f] = row[f].plus(self.bg.pixel(f, self.s, &mut omega));
            }
        }
        omega
    }

    /// As [`Self::add_exact`], in lanes of this CPU's SIMD level.
    fn add_fast<T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) -> f64 {
        #[cfg(target_arch = "x86_64")]
        {
            use super::simd::{avx2, avx512};
            match level() {
                // SAFETY: `level` is at most this CPU's (`cpu::simd_level`).
                SimdLevel::Avx512 => return unsafe { self.avx512::<avx512::F64x8, T>(lanes, row) },
                // SAFETY: as above.
                SimdLevel::Avx2 => return unsafe { self.avx2::<avx2::F64x4, T>(lanes, row) },
                SimdLevel::Scalar => {}
            }
        }
        self.lanes::<f64, T>(lanes, row)
    }

    /// [`Self::lanes`] compiled with AVX-512F.
    ///
    /// # Safety
    /// The CPU must have AVX-512F, AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,fma")]
    unsafe fn avx512<V: Num<Scalar = f64>, T: Pixel>(
        &self,
        lanes: &FastBackground,
        row: &mut [T],
    ) -> f64 {
        self.lanes::<V, T>(lanes, row)
    }

    /// [`Self::lanes`] compiled with AVX2 and FMA.
    ///
    /// # Safety
    /// The CPU must have AVX2 and FMA.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2<V: Num<Scalar = f64>, T: Pixel>(
        &self,
        lanes: &FastBackground,
        row: &mut [T],
    ) -> f64 {
        self.lanes::<V, T>(lanes, row)
    }

    #[inline(always)]
    fn lanes<V: Num<Scalar = f64>, T: Pixel>(&self, lanes: &FastBackground, row: &mut [T]) -> f64 {
        let (mut omega, mut omega_lanes) = (0.0, V::zero());
        let mut f0 = self.lo;
        while f0 <= self.hi {
            let (v, o, beyond) = lanes.lanes::<V>(f0, self.s);
            let beyond = beyond.bits();
            if beyond == 0 && self.mask.is_none() && f0 + V::LANES <= self.hi + 1 {
                for (i, p) in row[f0..f0 + V::LANES].iter_mut().enumerate() {
                    *p = p.plus(v.lane(i));
                }
                omega_lanes += o;
                f0 += V::LANES;
                continue;
            }
            for i in 0..V::LANES.min(self.hi + 1 - f0) {
                let f = f0 + i;
                if self.mask.is_some_and(|m| m[f] == 0) {
                    continue;
                }
                let value = if beyond >> i & 1 != 0 {
                    self.bg.pixel(f, self.s, &mut omega)
                } else {
                    omega += o.lane(i);
                    v.lane(i)
                };
                row[f] = row[f].plus(value);
            }
            f0 += V::LANES;
        }
        (0..V::LANES).fold(omega, |sum, i| sum + omega_lanes.lane(i))
    }
}

/// The background alone as nonBragg renders it ([`Background::render`]),
/// in its fast form (within 1e-7 relative, see [`FastBackground`]), rows in
/// parallel on rayon's current pool; `None` where it has no fast form. The
/// solid-angle total is summed in another order than nonBragg's.
pub fn fast_amorphous_image(bg: &Background) -> Option<AmorphousImage> {
    use rayon::prelude::*;
    let lanes = bg.fast()?;
    let det = bg.detector();
    let nf = det.fpixels;
    let mut pixels = vec![0.0f32; nf * det.spixels];
    let omega: Vec<f64> = pixels
        .par_chunks_mut(nf.max(1))
        .enumerate()
        .map(|(s, row)| {
            // a write before the first read: a fresh allocation's pages read
            // first map the shared zero page, and the write after it then
            // costs a copy and a TLB flush on every core
            row.fill(0.0);
            let Some((lo, hi)) = roi_row_of(det.roi, nf, s) else { return 0.0 };
            Row { bg, s, lo, hi, mask: None }.add_fast(lanes, row)
        })
        .collect();
    let omega_sum = omega.iter().sum();
    Some(AmorphousImage { pixels, omega_sum })
}

/// This CPU's SIMD level (or the one `NANOBRAGG_SIMD` names), read once.
#[cfg(target_arch = "x86_64")]
fn level() -> SimdLevel {
    static LEVEL: std::sync::OnceLock<SimdLevel> = std::sync::OnceLock::new();
    *LEVEL.get_or_init(super::cpu::simd_level)
}
