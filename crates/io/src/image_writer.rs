//! The one way an image file is written: an [`Image`], which names its
//! format and holds its pixels and header values, written into an output
//! being written ([`Pending`], committed by the caller with the run's other
//! outputs). The caller chooses what to write; the format's bytes are made
//! here (by [`crate::smv`], [`crate::pgm`], [`crate::cbf`], [`crate::nxmx`]).
//! A dataset's many shots in one NXmx file are written a frame at a time
//! through [`series`].

use crate::atomic::Pending;
use crate::mx::MxImage;
pub use crate::nxmx::Compression;
pub use crate::nxmx_series::SeriesFile;
pub use crate::smv::{SmvHeader, SmvPixels};
use crate::IoError;
use std::path::Path;

/// An image in the format of its file.
pub enum Image<'a> {
    /// Raw little-endian 4-byte floats, no header (`-floatfile`,
    /// `-gradfile`).
    Float(&'a [f32]),
    /// SMV: the header, then 2- or 4-byte pixels (`-intfile`, `-noisefile`).
    Smv(&'a SmvHeader, SmvPixels<'a>),
    /// Binary PGM (`P5`): one byte per pixel, the scale in its comment
    /// (`-pgmfile`).
    Pgm {
        /// Pixels along fast.
        fpixels: usize,
        /// Pixels along slow.
        spixels: usize,
        /// The scale the bytes were made with, as the header tells it.
        scale: f64,
        /// `fpixels * spixels` bytes, fast index fastest.
        bytes: &'a [u8],
    },
    /// miniCBF: int32 pixels of one panel with a Pilatus header
    /// (`-cbffile`).
    Cbf(&'a MxImage<'a>),
    /// NXmx (HDF5): int32 pixels of every panel with the geometry and the
    /// experiment's values (`-nxmxfile`).
    Nxmx(&'a MxImage<'a>, Compression),
}

/// Writes `image` into `file` in its format.
pub fn write(file: &mut Pending, image: Image<'_>) -> Result<(), IoError> {
    match image {
        Image::Float(values) => file.write(|w| crate::le::write_le(w, values)),
        Image::Smv(header, pixels) => crate::smv::write_smv(file, header, pixels),
        Image::Pgm { fpixels, spixels, scale, bytes } => {
            crate::pgm::write_pgm(file, fpixels, spixels, scale, bytes)
        }
        Image::Cbf(img) => crate::cbf::write_cbf(file, img),
        Image::Nxmx(img, compression) => crate::nxmx::write_nxmx(file, img, compression),
    }
}

/// Starts the NXmx file `target` of `frames` shots of the detector and
/// experiment of `header` (its pixels are not read), written a frame at a
/// time and renamed into place by [`SeriesFile::commit`]. `noiseless`: also
/// keep each shot's float image; `spec`: the dataset's specification and
/// its digest, stored with the shots; `scan`: a rotation series' phi at the
/// start of each frame (see [`SeriesFile::create`]).
pub fn series(
    target: &Path,
    header: &MxImage<'_>,
    frames: usize,
    noiseless: bool,
    spec: (&str, &str),
    compression: Compression,
    scan: Option<&[f64]>,
) -> Result<SeriesFile, IoError> {
    SeriesFile::create(target, header, frames, noiseless, spec, compression, scan)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each format through the one writer gives the bytes of its own
    /// module's encoder.
    #[test]
    fn formats_write_their_bytes() {
        let dir = std::env::temp_dir().join(format!("nanobragg-io-writer-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let written = |name: &str, image: Image<'_>| {
            let path = dir.join(name);
            let mut file = Pending::create(&path).unwrap();
            write(&mut file, image).unwrap();
            file.commit().unwrap();
            std::fs::read(&path).unwrap()
        };
        let floats = [1.5f32, -2.0, 0.0, 3.25];
        assert_eq!(written("f.bin", Image::Float(&floats)), crate::float::float_bytes(&floats));
        let fields = crate::smv::SmvHeaderFields { fpixels: 2, spixels: 2, ..Default::default() };
        let header = SmvHeader::from(&fields);
        let pixels = [1u16, 2, 65535, 40];
        assert_eq!(
            written("i.img", Image::Smv(&header, SmvPixels::U16(&pixels))),
            crate::smv::smv_bytes(&fields, &pixels)
        );
        let wide = written("w.img", Image::Smv(&header, SmvPixels::U32(&[1, 2, 3, 1 << 20])));
        assert!(String::from_utf8_lossy(&wide[..512]).contains("TYPE=long_integer;"));
        assert_eq!(&wide[512 + 12..], (1u32 << 20).to_le_bytes());
        let bytes = [0u8, 7, 255, 9];
        let pgm =
            written("p.pgm", Image::Pgm { fpixels: 2, spixels: 2, scale: 2.5, bytes: &bytes });
        assert_eq!(pgm, [crate::pgm::pgm_header(2, 2, 2.5).as_bytes(), &bytes].concat());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
