//! Little-endian bytes of pixel slices, written without a copy where the host
//! is little-endian (every platform we build for); a converting fallback keeps
//! big-endian hosts correct.

use std::io::{self, Write};

/// A pixel type stored little-endian in our files.
pub trait LePixel: Copy + Send + Sync + 'static {
    /// Size in bytes.
    const SIZE: usize;
    /// The value's little-endian bytes appended to `out`.
    fn push_le(self, out: &mut Vec<u8>);
}

impl LePixel for f32 {
    const SIZE: usize = 4;
    fn push_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl LePixel for u16 {
    const SIZE: usize = 2;
    fn push_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl LePixel for u32 {
    const SIZE: usize = 4;
    fn push_le(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
}

impl LePixel for u8 {
    const SIZE: usize = 1;
    fn push_le(self, out: &mut Vec<u8>) {
        out.push(self);
    }
}

/// Writes `values` as little-endian bytes.
pub fn write_le<T: LePixel>(w: &mut impl Write, values: &[T]) -> io::Result<()> {
    #[cfg(target_endian = "little")]
    {
        // SAFETY: f32, u32, u16 and u8 have no padding and no invalid bit patterns
        // as bytes; the view covers exactly the slice's memory, and on a
        // little-endian host that memory is the little-endian encoding.
        let bytes = unsafe {
            std::slice::from_raw_parts(values.as_ptr().cast::<u8>(), std::mem::size_of_val(values))
        };
        w.write_all(bytes)
    }
    #[cfg(not(target_endian = "little"))]
    {
        let mut buf = Vec::with_capacity(64 * 1024 * T::SIZE);
        for chunk in values.chunks(64 * 1024) {
            buf.clear();
            for &v in chunk {
                v.push_le(&mut buf);
            }
            w.write_all(&buf)?;
        }
        Ok(())
    }
}

/// `bytes` (a mapped file on a little-endian host, see
/// [`crate::atomic::Pending::map`]) seen as `T` values. Panics where `bytes`
/// is misaligned for `T` or not a whole number of `T`.
pub fn values_mut<T: LePixel>(bytes: &mut [u8]) -> &mut [T] {
    assert_eq!(bytes.len() % T::SIZE, 0, "a partial value at the end");
    // SAFETY: f32, u16 and u8 accept any bit pattern, and the assertion
    // below rejects a misaligned start.
    let (head, values, tail) = unsafe { bytes.align_to_mut::<T>() };
    assert!(head.is_empty() && tail.is_empty(), "misaligned values");
    values
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn little_endian_bytes() {
        let mut out = Vec::new();
        write_le(&mut out, &[1.0f32, -2.5]).unwrap();
        write_le(&mut out, &[0x1234u16]).unwrap();
        write_le(&mut out, &[7u8]).unwrap();
        let mut want = Vec::new();
        for v in [1.0f32, -2.5] {
            want.extend_from_slice(&v.to_le_bytes());
        }
        want.extend_from_slice(&[0x34, 0x12, 7]);
        assert_eq!(out, want);
    }
}
