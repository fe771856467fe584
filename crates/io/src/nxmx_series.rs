//! Many shots in one NXmx file, written a frame at a time: the output of a
//! dataset (`nanobragg dataset`), one file per worker.
//!
//! The layout is [`crate::nxmx`]'s with N frames, plus what varies per shot:
//!
//! ```text
//! /entry/data/data               int32 (N, slow, fast) or (N, panels, slow, fast),
//!                                one frame a chunk
//! /entry/instrument/beam         incident_wavelength (N) Å, one per shot; or (N, m)
//!                                with incident_wavelength_weights (N, m) for spectra;
//!                                incident_polarisation_stokes
//! /entry/simulation              NXcollection, one value per shot (axis 0):
//!   shot                         uint64: the shot's index in the dataset
//!   misset_deg (N, 3)            crystal rotation about x, y, z (nanoBragg's -misset)
//!   n_cells (N, 3)               unit cells along a, b, c (-Na -Nb -Nc)
//!   mosaic_spread_deg, mosaic_seed, fluence (photons/m²), water_um,
//!   noise_seed, photons (on the image, after noise)
//!   noiseless (N, ...)           float32 photons before noise (optional)
//!   spec, spec_digest            the dataset's specification and its digest
//! ```
//!
//! The file is written to a hidden temporary beside its name and renamed
//! when [`SeriesFile::commit`] is called: a worker that dies leaves no file
//! that looks whole.

use std::path::Path;

use rust_hdf5::{H5Dataset, H5File, H5Group};

use crate::atomic::Pending;
use crate::h5::{
    array, array_nd, attr_text, error, frames_dataset, group, number, text, Compression, H5,
};
use crate::mx::MxImage;
use crate::nxmx::{frame_shape, header, link_data, panel_sizes, stack_panels};
use crate::IoError;

pub use crate::shot_record::ShotRecord;

/// An NXmx file of `frames` shots being written.
pub struct SeriesFile {
    // the HDF5 handles come first: they close before `pending` removes an
    // uncommitted temporary
    data: Option<H5Dataset>,
    noiseless: Option<H5Dataset>,
    file: Option<H5File>,
    pending: Option<Pending>,
    /// Panel sizes (fast, slow), for stacking.
    panels: Vec<(usize, usize)>,
    frames: usize,
    records: Vec<ShotRecord>,
    /// The beam's Stokes vector in the NeXus frame, written with the wavelengths.
    stokes: [f64; 4],
    /// Incident photons per second.
    total_flux: f64,
}

impl SeriesFile {
    /// Starts `target` (a regular file; written on [`Self::commit`]) for
    /// `frames` shots of the detector and experiment of `img` (its pixels
    /// are not read), the frames stored as `compression` says. `noiseless`:
    /// also keep the float images. `spec`: the dataset's specification and
    /// its digest, stored with the shots. `scan`: a rotation series, each
    /// frame's phi at its start (one per frame), else every frame at the
    /// image's phi.
    pub fn create(
        target: &Path,
        img: &MxImage,
        frames: usize,
        noiseless: bool,
        spec: (&str, &str),
        compression: Compression,
        scan: Option<&[f64]>,
    ) -> Result<SeriesFile, IoError> {
        if img.panels.is_empty() || frames == 0 {
            return Err(IoError::InvalidInput {
                path: target.to_path_buf(),
                reason: "a series needs a panel and a frame".into(),
            });
        }
        if scan.is_some_and(|s| s.len() != frames) {
            return Err(IoError::InvalidInput {
                path: target.to_path_buf(),
                reason: format!("a rotation series of {frames} frames needs {frames} angles"),
            });
        }
        let pending = Pending::create(target)?;
        let Some(temp) = pending.temp_path().map(Path::to_path_buf) else {
            return Err(IoError::InvalidInput {
                path: target.to_path_buf(),
                reason: "a dataset file must be a regular file, not a device or pipe".into(),
            });
        };
        let err = error(target);
        let file = H5File::create(&temp).map_err(&err)?;
        let root = file.root_group();
        header(&root, img, scan).map_err(&err)?;
        let [n, smax, fmax] = frame_shape(img);
        let frame = if n == 1 { vec![smax, fmax] } else { vec![n, smax, fmax] };
        let shape: Vec<usize> = std::iter::once(frames).chain(frame.iter().copied()).collect();
        let data_group = root.group("entry/data").map_err(&err)?;
        let data = frames_dataset::<i32>(&data_group, "data", &shape, compression).map_err(&err)?;
        link_data(&root).map_err(&err)?;
        let entry = root.group("entry").map_err(&err)?;
        let sim = group(&entry, "simulation", "NXcollection").map_err(&err)?;
        text(&sim, "spec", spec.0).map_err(&err)?;
        text(&sim, "spec_digest", spec.1).map_err(&err)?;
        if let Some(stream) = img.noise_rng {
            text(&sim, "noise_rng", stream).map_err(&err)?;
        }
        let noiseless = match noiseless {
            true => {
                let ds = frames_dataset::<f32>(&sim, "noiseless", &shape, compression);
                let ds = ds.map_err(&err)?;
                attr_text(&ds, "units", "photons").map_err(&err)?;
                Some(ds)
            }
            false => None,
        };
        Ok(SeriesFile {
            stokes: img.stokes(),
            total_flux: img.total_flux,
            data: Some(data),
            noiseless,
            file: Some(file),
            pending: Some(pending),
            panels: panel_sizes(img),
            frames,
            records: Vec::new(),
        })
    }

    /// The file this series becomes.
    pub fn target(&self) -> &Path {
        self.pending.as_ref().expect("present until committed").target()
    }

    /// Writes the next frame: `pixels[k]` the counts of panel k (fast index
    /// fastest), `noiseless[k]` its float image where the file keeps those.
    pub fn write_frame(
        &mut self,
        pixels: &[&[i32]],
        noiseless: Option<&[&[f32]]>,
        record: ShotRecord,
    ) -> Result<(), IoError> {
        let target = self.target().to_path_buf();
        let invalid = |reason: String| IoError::InvalidInput { path: target.clone(), reason };
        let k = self.records.len();
        if k >= self.frames {
            return Err(invalid(format!("more than the {} frames of the file", self.frames)));
        }
        if pixels.len() != self.panels.len()
            || pixels.iter().zip(&self.panels).any(|(p, (f, s))| p.len() != f * s)
        {
            return Err(invalid("a frame's panels do not match the detector".into()));
        }
        let err = error(&target);
        let data = self.data.as_ref().expect("open until committed");
        match pixels {
            [one] => crate::h5::write_frame(data, k, one),
            _ => crate::h5::write_frame(data, k, &stack_panels(&self.panels, pixels)),
        }
        .map_err(&err)?;
        if let (Some(ds), Some(parts)) = (&self.noiseless, noiseless) {
            match parts {
                [one] => crate::h5::write_frame(ds, k, one),
                _ => crate::h5::write_frame(ds, k, &stack_panels(&self.panels, parts)),
            }
            .map_err(&err)?;
        }
        self.records.push(record);
        Ok(())
    }

    /// Writes the shots' values, closes the file and renames it into place.
    /// A file not committed is removed.
    pub fn commit(mut self) -> Result<(), IoError> {
        let target = self.target().to_path_buf();
        if self.records.len() != self.frames {
            return Err(IoError::InvalidInput {
                path: target,
                reason: format!("{} of {} frames written", self.records.len(), self.frames),
            });
        }
        let err = error(&target);
        let file = self.file.take().expect("open until committed");
        write_records(&file.root_group(), &self.records, self.stokes, self.total_flux)
            .map_err(&err)?;
        // every handle closed before the rename
        self.data.take();
        self.noiseless.take();
        file.close().map_err(&err)?;
        self.pending.take().expect("present until committed").commit()
    }
}

/// The per-shot values of `/entry/simulation` and the beam's wavelengths.
fn write_records(
    root: &H5Group,
    records: &[ShotRecord],
    stokes: [f64; 4],
    total_flux: f64,
) -> H5<()> {
    let n = records.len();
    let sim = root.group("entry/simulation")?;
    let shots: Vec<u64> = records.iter().map(|r| r.shot).collect();
    array(&sim, "shot", &shots, None)?;
    let triple = |name: &str, f: &dyn Fn(&ShotRecord) -> [f64; 3], units: Option<&str>| {
        let v: Vec<f64> = records.iter().flat_map(f).collect();
        array_nd(&sim, name, &[n, 3], &v, units)
    };
    triple("misset_deg", &|r| r.misset_deg, Some("deg"))?;
    triple("n_cells", &|r| r.n_cells, None)?;
    let column = |name: &str, f: &dyn Fn(&ShotRecord) -> f64, units: Option<&str>| {
        let v: Vec<f64> = records.iter().map(f).collect();
        array(&sim, name, &v, units)
    };
    column("mosaic_spread_deg", &|r| r.mosaic_spread_deg, Some("deg"))?;
    column("fluence", &|r| r.fluence, Some("m-2"))?;
    column("water_um", &|r| r.water_um, Some("um"))?;
    column("photons", &|r| r.photons, None)?;
    let seeds = |name: &str, f: &dyn Fn(&ShotRecord) -> i64| {
        let v: Vec<i64> = records.iter().map(f).collect();
        array(&sim, name, &v, None)
    };
    seeds("noise_seed", &|r| r.noise_seed)?;
    seeds("mosaic_seed", &|r| r.mosaic_seed)?;

    // the beam: one wavelength per shot, or a spectrum per shot (channels
    // padded with zero weights to the longest)
    let beam = group(&root.group("entry/instrument")?, "beam", "NXbeam")?;
    let m = records.iter().map(|r| r.spectrum_a.len()).max().unwrap_or(1);
    if m <= 1 {
        let v: Vec<f64> =
            records.iter().map(|r| r.spectrum_a.first().map_or(0.0, |c| c.0)).collect();
        array(&beam, "incident_wavelength", &v, Some("angstrom"))?;
    } else {
        let (mut lambdas, mut weights) = (Vec::with_capacity(n * m), Vec::with_capacity(n * m));
        for r in records {
            for c in 0..m {
                let (l, w) = r.spectrum_a.get(c).copied().unwrap_or((r.spectrum_a[0].0, 0.0));
                lambdas.push(l);
                weights.push(w);
            }
        }
        array_nd(&beam, "incident_wavelength", &[n, m], &lambdas, Some("angstrom"))?;
        array_nd(&beam, "incident_wavelength_weights", &[n, m], &weights, None)?;
    }
    let n = records.len();
    let all: Vec<f64> = (0..n).flat_map(|_| stokes).collect();
    array_nd(&beam, "incident_polarisation_stokes", &[n, 4], &all, None)?;
    number(&beam, "total_flux", total_flux, Some("Hz"))?;
    Ok(())
}

/// The shots a committed series file holds and the digest of the
/// specification it was written from.
pub fn read_shots(path: &Path) -> Result<(Vec<u64>, String), IoError> {
    let err = error(path);
    // (a FIFO of that name would block the open for good)
    crate::regular_file(path)?;
    let file = H5File::open(path).map_err(&err)?;
    let shots: Vec<u64> =
        file.dataset("entry/simulation/shot").and_then(|d| d.read_raw()).map_err(&err)?;
    let digest = file.dataset("entry/simulation/spec_digest").map_err(&err)?;
    let digest = crate::read_image::text_of(&digest).map_err(&err)?;
    Ok((shots, digest))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mx::Panel;
    use crate::nxmx::tests::image;

    fn record(shot: u64, channels: usize) -> ShotRecord {
        ShotRecord {
            shot,
            spectrum_a: (0..channels)
                .map(|c| (1.0 + c as f64 * 0.01, 1.0 / channels as f64))
                .collect(),
            misset_deg: [shot as f64, 2.0, 3.0],
            n_cells: [5.0; 3],
            mosaic_spread_deg: 0.1,
            mosaic_seed: 7,
            fluence: 1e24,
            water_um: 0.0,
            noise_seed: 100 + shot as i64,
            photons: 12.0,
        }
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_refused_not_opened() {
        let dir = std::env::temp_dir().join(format!("nb-series-fifo-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("ds_00000.nxs");
        let c = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
        // SAFETY: a NUL-terminated path; mkfifo reads it only
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
        // (opening it would block with no writer)
        let e = read_shots(&path).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn frames_panels_and_records() {
        let dir = std::env::temp_dir().join(format!("nb-series-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("s.nxs");
        let panel = |f, s| Panel {
            origin_m: [0.1, 0.0, 0.0],
            fast: [0.0, 0.0, 1.0],
            slow: [0.0, -1.0, 0.0],
            pixel_size_m: 1e-4,
            fpixels: f,
            spixels: s,
            pixels: &[],
        };
        let img = image(vec![panel(3, 2), panel(2, 1)]);
        let mut file = SeriesFile::create(
            &target,
            &img,
            2,
            true,
            ("spec text", "abc"),
            Compression::None,
            None,
        )
        .unwrap();
        let frames: Vec<(Vec<i32>, Vec<i32>)> =
            (0..2).map(|k| ((0..6).map(|i| i + 10 * k).collect(), vec![-1 - k, -2 - k])).collect();
        for (k, (a, b)) in frames.iter().enumerate() {
            let fa: Vec<f32> = a.iter().map(|&v| v as f32 + 0.5).collect();
            let fb: Vec<f32> = b.iter().map(|&v| v as f32 + 0.5).collect();
            file.write_frame(&[a, b], Some(&[&fa, &fb]), record(40 + k as u64, 3 - k)).unwrap();
        }
        // too many frames, or panels of the wrong size, are refused
        assert!(file.write_frame(&[&frames[0].0, &frames[0].1], None, record(9, 1)).is_err());
        assert!(!target.exists(), "nothing at the name before the commit");
        file.commit().unwrap();
        let (shots, digest) = read_shots(&target).unwrap();
        assert_eq!((shots, digest.as_str()), (vec![40, 41], "abc"));

        let f = H5File::open(&target).unwrap();
        let data = f.dataset("entry/data/data").unwrap();
        assert_eq!(data.shape(), [2, 2, 2, 3]);
        let all: Vec<i32> = data.read_raw().unwrap();
        // frame 1, panel 1 (1 x 2) in the corner of its (2 x 3) slot
        assert_eq!(&all[12..18], &[10, 11, 12, 13, 14, 15]);
        assert_eq!(&all[18..24], &[-2, -3, 0, 0, 0, 0]);
        let floats: Vec<f32> = f.dataset("entry/simulation/noiseless").unwrap().read_raw().unwrap();
        assert_eq!(floats[18], -1.5);
        let lam = f.dataset("entry/instrument/beam/incident_wavelength").unwrap();
        assert_eq!(lam.shape(), [2, 3]);
        let w: Vec<f64> = f
            .dataset("entry/instrument/beam/incident_wavelength_weights")
            .unwrap()
            .read_raw()
            .unwrap();
        // shot 41 has two channels: the third padded with weight 0
        assert_eq!(w[5], 0.0);
        let misset: Vec<f64> =
            f.dataset("entry/simulation/misset_deg").unwrap().read_raw().unwrap();
        assert_eq!(misset, [40.0, 2.0, 3.0, 41.0, 2.0, 3.0]);
        drop((f, data, lam));

        // a file not committed leaves nothing behind
        let other = dir.join("t.nxs");
        let file =
            SeriesFile::create(&other, &img, 2, false, ("", ""), Compression::None, None).unwrap();
        drop(file);
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1);
        std::fs::remove_dir_all(&dir).ok();
    }
}
