//! Philox4x32-10, the counter-based generator of Salmon, Moraes, Dror and
//! Shaw ("Parallel random numbers: as easy as 1, 2, 3", SC 2011), as
//! Random123 and cuRAND give it: four 32-bit words out of a 128-bit counter
//! and a 64-bit key, each output depending on nothing else. The noise of
//! the `parallel` stream ([`crate::noise_stream`]) keys it with the seed and
//! counts with the pixel's index, so a pixel's draws are the same whichever
//! thread, tile or panel draws them.

/// The multipliers of the two Philox S-boxes.
const M0: u32 = 0xD251_1F53;
const M1: u32 = 0xCD9E_8D57;
/// The Weyl increments of the key schedule (the golden ratio and √3 − 1).
const W0: u32 = 0x9E37_79B9;
const W1: u32 = 0xBB67_AE85;

/// The high and low words of the 64-bit product `a · b`.
#[inline(always)]
fn mulhilo(a: u32, b: u32) -> (u32, u32) {
    let p = u64::from(a) * u64::from(b);
    ((p >> 32) as u32, p as u32)
}

/// One Philox round.
#[inline(always)]
fn round(c: [u32; 4], k: [u32; 2]) -> [u32; 4] {
    let (hi0, lo0) = mulhilo(M0, c[0]);
    let (hi1, lo1) = mulhilo(M1, c[2]);
    [hi1 ^ c[1] ^ k[0], lo1, hi0 ^ c[3] ^ k[1], lo0]
}

/// Philox4x32 with 10 rounds: the block of `counter` under `key`.
#[inline]
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut c, mut k) = (counter, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        c = round(c, k);
    }
    c
}

/// [`philox4x32_10`] of `L` counters at once, all under `key`: `c[w][i]` is
/// word `w` of lane `i`'s counter. The lanes' arithmetic stands side by
/// side, which the compiler turns into vector multiplies.
#[inline(always)]
pub fn philox4x32_10_lanes<const L: usize>(
    counters: [[u32; L]; 4],
    key: [u32; 2],
) -> [[u32; L]; 4] {
    let (mut c, mut k) = (counters, key);
    for r in 0..10 {
        if r > 0 {
            k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
        }
        let mut next = [[0u32; L]; 4];
        for i in 0..L {
            let p0 = u64::from(M0) * u64::from(c[0][i]);
            let p1 = u64::from(M1) * u64::from(c[2][i]);
            next[0][i] = (p1 >> 32) as u32 ^ c[1][i] ^ k[0];
            next[1][i] = p1 as u32;
            next[2][i] = (p0 >> 32) as u32 ^ c[3][i] ^ k[1];
            next[3][i] = p0 as u32;
        }
        c = next;
    }
    c
}

/// Counters drawn together by [`philox4x32_10_x16`]: one AVX-512 vector of
/// 32-bit words.
pub const X16: usize = 16;

/// [`philox4x32_10`] of 16 counters under `key` (`c[w][i]`: word `w` of
/// lane `i`), in AVX-512 vectors where the CPU has them, else in
/// [`philox4x32_10_lanes`]: the same words either way.
#[inline]
pub fn philox4x32_10_x16(counters: &[[u32; X16]; 4], key: [u32; 2]) -> [[u32; X16]; 4] {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f") {
            // SAFETY: the CPU has AVX-512F.
            return unsafe { philox4x32_10_avx512(counters, key) };
        }
    }
    philox4x32_10_lanes(*counters, key)
}

/// [`philox4x32_10_x16`] in AVX-512: each word of the 16 counters is one
/// vector, and a round's two 32 × 32 → 64-bit products are taken for the
/// even and the odd lanes apart (`vpmuludq` multiplies the low words of
/// 64-bit lanes), then blended back into high and low words.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn philox4x32_10_avx512(counters: &[[u32; X16]; 4], key: [u32; 2]) -> [[u32; X16]; 4] {
    use std::arch::x86_64::*;
    // the high and low words of m · a, lane by lane
    #[inline(always)]
    fn mulhilo(m: __m512i, a: __m512i) -> (__m512i, __m512i) {
        // SAFETY: only reached from the function above, which has AVX-512F.
        unsafe {
            let even = _mm512_mul_epu32(a, m);
            let odd = _mm512_mul_epu32(_mm512_srli_epi64::<32>(a), m);
            let lo = _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64::<32>(odd));
            let hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64::<32>(even), odd);
            (hi, lo)
        }
    }
    // SAFETY: the loads and stores cover exactly the 16 words of each
    // array (unaligned access); the CPU has AVX-512F.
    unsafe {
        let load = |w: &[u32; X16]| _mm512_loadu_si512(w.as_ptr().cast());
        let mut c =
            [load(&counters[0]), load(&counters[1]), load(&counters[2]), load(&counters[3])];
        let (m0, m1) = (_mm512_set1_epi64(i64::from(M0)), _mm512_set1_epi64(i64::from(M1)));
        let mut k = key;
        for r in 0..10 {
            if r > 0 {
                k = [k[0].wrapping_add(W0), k[1].wrapping_add(W1)];
            }
            let (hi0, lo0) = mulhilo(m0, c[0]);
            let (hi1, lo1) = mulhilo(m1, c[2]);
            let k0 = _mm512_set1_epi32(k[0] as i32);
            let k1 = _mm512_set1_epi32(k[1] as i32);
            c = [
                _mm512_xor_si512(_mm512_xor_si512(hi1, c[1]), k0),
                lo1,
                _mm512_xor_si512(_mm512_xor_si512(hi0, c[3]), k1),
                lo0,
            ];
        }
        let mut out = [[0u32; X16]; 4];
        for (o, v) in out.iter_mut().zip(c) {
            _mm512_storeu_si512(o.as_mut_ptr().cast(), v);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lanes_are_the_single_generator() {
        let key = [0xdead_beef, 0x0123_4567];
        let counters: [[u32; 8]; 4] = std::array::from_fn(|w| {
            std::array::from_fn(|i| (i as u32).wrapping_mul(0x9e37_79b9) ^ ((w as u32) << 7))
        });
        let out = philox4x32_10_lanes(counters, key);
        for i in 0..8 {
            let one = philox4x32_10([0, 1, 2, 3].map(|w| counters[w][i]), key);
            assert_eq!(one, [0, 1, 2, 3].map(|w| out[w][i]), "lane {i}");
        }
    }

    #[test]
    fn x16_is_the_single_generator() {
        let key = [0x0bad_f00d, 0x7777_1234];
        let counters: [[u32; X16]; 4] = std::array::from_fn(|w| {
            std::array::from_fn(|i| (i as u32).wrapping_mul(0x85eb_ca6b) ^ ((w as u32) << 29))
        });
        let out = philox4x32_10_x16(&counters, key);
        for i in 0..X16 {
            let one = philox4x32_10([0, 1, 2, 3].map(|w| counters[w][i]), key);
            assert_eq!(one, [0, 1, 2, 3].map(|w| out[w][i]), "lane {i}");
        }
    }

    /// Random123's known-answer vectors (kat_vectors, philox4x32 10).
    #[test]
    fn known_answers() {
        let cases = [
            ([0; 4], [0; 2], [0x6627_e8d5, 0xe169_c58d, 0xbc57_ac4c, 0x9b00_dbd8]),
            ([u32::MAX; 4], [u32::MAX; 2], [0x408f_276d, 0x41c8_3b0e, 0xa20b_c7c6, 0x6d54_51fd]),
            (
                [0x243f_6a88, 0x85a3_08d3, 0x1319_8a2e, 0x0370_7344],
                [0xa409_3822, 0x299f_31d0],
                [0xd16c_fe09, 0x94fd_cceb, 0x5001_e420, 0x2412_6ea1],
            ),
        ];
        for (counter, key, want) in cases {
            assert_eq!(philox4x32_10(counter, key), want, "{counter:08x?} {key:08x?}");
        }
    }
}
