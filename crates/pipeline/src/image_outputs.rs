//! The images a render writes after its float image, as nanoBragg.c writes
//! them: the statistics lines, the integer SMV image, the PGM preview, the
//! noise image (with the detector response where asked) and the int32
//! images of NXmx and miniCBF. This module chooses each image's pixels and
//! header values; [`nanobragg_io::image_writer`] writes the formats.

use crate::detector_response::{report_psf, response, NOISIFY_CALIB_IDUM};
use crate::image_headers::{mx_image, parallel_noise_header, smv_header};
use crate::invocation::{Invocation, Outputs};
use crate::output_files::write_error;
use anyhow::Result;
use nanobragg_core::noise_stream::{NoiseStream, PixelStream};
use nanobragg_core::render::RenderInfo;
use nanobragg_core::response::{noisy_image_parallel, noisy_image_tiled, Bits, SharedSeeds};
use nanobragg_core::rng::NoiseRng;
use nanobragg_core::setup::Plan;
use nanobragg_core::stats::{
    image_stats, rmsd, rmsd_from_deviations, roi_rows, row_deviation, stats_but_rmsd, ImageStats,
};
use nanobragg_core::Experiment;
use nanobragg_io::atomic::Pending;
use nanobragg_io::cfmt::g;
use nanobragg_io::image_writer::{self, Image, SmvPixels};
use nanobragg_io::{pgm, IoError};
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};

/// The files [`write_images`] writes (`None`: that image is not written).
pub struct ImageFiles<'a> {
    /// `-intfile`.
    pub int: Option<&'a mut Pending>,
    /// `-pgmfile`.
    pub pgm: Option<&'a mut Pending>,
    /// `-noisefile`.
    pub noise: Option<&'a mut Pending>,
    /// `-nxmxfile`.
    pub nxmx: Option<&'a mut Pending>,
    /// `-cbffile`.
    pub cbf: Option<&'a mut Pending>,
    /// Where the int32 image of NXmx and miniCBF is kept (a rotation
    /// series' frame), if anywhere.
    pub frame: Option<&'a mut Vec<i32>>,
}

/// The image statistics, with the integer image written on the way (where
/// there is a `file`): where the CPU render gathered each row's sums, the
/// RMSD's pass over the image rides along with the int conversion. Returns
/// them with the int scale.
fn statistics_and_int_image(
    file: Option<&mut Pending>,
    plan: &Plan,
    o: &Outputs,
    image: &[f32],
    rendered: &RenderInfo,
) -> (ImageStats, f64, Result<(), IoError>) {
    let d = &plan.detector;
    let (fp, sp, roi, mask) = (d.fpixels, d.spixels, d.roi, plan.mask.as_deref());
    let from_rows = rendered.rows.len() == sp;
    let mut stats = if from_rows {
        stats_but_rmsd(fp, &rendered.rows)
    } else {
        image_stats(image, fp, roi, mask)
    };
    let mut int_scale = o.int_scale;
    if int_scale <= 0.0 {
        int_scale = if stats.max_i > 0.0 { 55000.0 / stats.max_i } else { 1.0 };
    }
    let Some(file) = file else {
        if from_rows {
            stats.rmsd = rmsd(image, fp, sp, roi, stats.mean);
        }
        return (stats, int_scale, Ok(()));
    };
    let devs: Vec<AtomicU64> =
        if from_rows { (0..sp).map(|_| AtomicU64::new(0)).collect() } else { Vec::new() };
    let mean = stats.mean;
    let mut fill = |row: usize, block: &mut [u16]| {
        pgm::int_rows_visiting(image, fp, roi, int_scale, o.adc_offset, row, block, |s, v| {
            if let Some(d) = devs.get(s) {
                d.store(row_deviation(v, mean).to_bits(), Ordering::Relaxed);
            }
        })
    };
    let header = smv_header(plan);
    let written = image_writer::write(file, Image::Smv(&header, SmvPixels::Rows(&mut fill)));
    if from_rows {
        stats.rmsd = if written.is_ok() {
            let devs: Vec<f64> = roi_rows(roi, sp)
                .map(|s| f64::from_bits(devs[s].load(Ordering::Relaxed)))
                .collect();
            rmsd_from_deviations(&devs, fp, sp, roi)
        } else {
            rmsd(image, fp, sp, roi, mean)
        };
    }
    (stats, int_scale, written)
}

/// The parallel stream's plain Poisson image of a float image, as a
/// 16-bit SMV file: drawn in parallel straight into the file's pages (no
/// image held, no copy).
pub struct ParallelNoiseFile<'a> {
    /// The expected photons.
    pub image: &'a [f32],
    /// Pixels a row.
    pub fpixels: usize,
    /// Rows.
    pub spixels: usize,
    /// The pixels drawn (0 outside), as [`nanobragg_core::noise::noise_image`] takes it.
    pub roi: [i64; 4],
    /// The ADC offset added to each count.
    pub adc_offset: f64,
}

impl ParallelNoiseFile<'_> {
    /// Writes the image into `file` under `header`; returns its photons,
    /// its overloads and whether the write succeeded.
    pub fn write(
        &self,
        file: &mut Pending,
        header: &nanobragg_io::smv::SmvHeader,
        stream: PixelStream,
    ) -> (f64, u64, Result<(), IoError>) {
        let (mut photons, mut overloads) = (0.0f64, 0u64);
        let mut fill = |row: usize, block: &mut [u16]| {
            let (p, over) = nanobragg_core::noise::noise_rows_parallel(
                self.image,
                self.fpixels,
                self.spixels,
                self.roi,
                self.adc_offset,
                stream,
                row,
                block,
            );
            photons += p;
            overloads += over;
        };
        let written = image_writer::write(file, Image::Smv(header, SmvPixels::Rows(&mut fill)));
        (photons, overloads, written)
    }
}

/// Writes the integer, PGM and noise images into their temporaries and
/// prints the statistics, as nanoBragg.c does after the float image.
/// `exp`: the panels and where they lie in the image (the NXmx file has one
/// module per panel; the PSF spreads light within each), its whole image's
/// plan the header values of the others.
pub fn write_images(
    out: &mut impl Write,
    exp: &Experiment,
    inv: &Invocation,
    image: &[f32],
    rendered: &RenderInfo,
    mut files: ImageFiles<'_>,
    noise_idum: i64,
) -> Result<()> {
    let plan = exp.whole();
    let (o, d) = (&inv.outputs, &plan.detector);
    let (fp, sp, roi) = (d.fpixels, d.spixels, d.roi);
    let writes_int = files.int.is_some();
    let (stats, int_scale, int_written) =
        statistics_and_int_image(files.int, plan, o, image, rendered);
    writeln!(out, "writing {} as {} 4-byte floats", o.floatfile.display(), fp * sp)?;
    let subpixel = d.pixel_size_m / plan.oversample as f64;
    let last = (plan.oversample - 1) as f64;
    let at = |i: usize| subpixel * (i as f64 * plan.oversample as f64 + last) + subpixel / 2.0;
    let (max_x, max_y) = if stats.count == 0 || stats.max_i <= 0.0 {
        (0.0, 0.0)
    } else {
        (at(stats.max_f), at(stats.max_s))
    };
    writeln!(out, "max_I = {}  at {} {}", g(stats.max_i), g(max_x), g(max_y))?;
    writeln!(out, "mean= {} rms= {} rmsd= {}", g(stats.mean), g(stats.rms), g(stats.rmsd))?;
    if writes_int {
        writeln!(out, "intfile_scale = {}", g(int_scale))?;
        writeln!(out, "writing {} as 2-byte integers", o.intfile.display())?;
    }
    int_written.map_err(|e| write_error("-intfile", e))?;

    if let Some(file) = files.pgm {
        let mut pgm_scale = o.pgm_scale;
        if pgm_scale <= 0.0 {
            pgm_scale = if stats.rmsd > 0.0 { 250.0 / (5.0 * stats.rmsd) } else { int_scale };
        }
        writeln!(out, "pgm_scale = {}", g(pgm_scale))?;
        let bytes = pgm::pgm_bytes(image, fp, sp, roi, pgm_scale);
        writeln!(out, "writing {} as 1-byte integers", o.pgmfile.display())?;
        let pgm = Image::Pgm { fpixels: fp, spixels: sp, scale: pgm_scale, bytes: &bytes };
        image_writer::write(file, pgm).map_err(|e| write_error("-pgmfile", e))?;
    }
    // the int32 image of -nxmxfile and -cbffile: the noise image's draws
    // when there is noise, else the -intfile conversion, neither clipped at 65535
    let wide = files.nxmx.is_some() || files.cbf.is_some() || files.frame.is_some();
    let mut pixels32 = (wide && !o.calculate_noise)
        .then(|| pgm::int_image_i32(image, fp, sp, roi, int_scale, o.adc_offset));
    // the parallel stream's plain Poisson image, drawn in parallel straight
    // into the file (no image held, no copy)
    let direct_noise = o.noise_rng == NoiseStream::Parallel
        && !wide
        && files.noise.is_some()
        && response(o, d.pixel_size_m)?.is_none();
    let direct_file = if direct_noise { files.noise.take() } else { None };
    if let Some(file) = direct_file {
        let stream = PixelStream { seed: noise_idum.wrapping_neg(), first_pixel: 0 };
        let header = parallel_noise_header(smv_header(plan), stream.seed);
        let noise =
            ParallelNoiseFile { image, fpixels: fp, spixels: sp, roi, adc_offset: o.adc_offset };
        let (photons, overloads, written) = noise.write(file, &header, stream);
        let photons = nanobragg_io::cfmt::f(photons, 0);
        writeln!(out, "{photons} photons on noise image ({overloads} overloads)")?;
        writeln!(out, "writing {} as 2-byte integers", o.noisefile.display())?;
        written.map_err(|e| write_error("-noisefile", e))?;
    } else if files.noise.is_some() || (wide && o.calculate_noise) {
        // -bits 32: the noise file's own 32-bit pixels
        let mut noise32 = None;
        let pixels = match response(o, d.pixel_size_m)? {
            None => {
                let (noise, wide_pixels) = match o.noise_rng {
                    NoiseStream::C => nanobragg_core::noise::noise_image_wide(
                        image,
                        fp,
                        sp,
                        roi,
                        o.adc_offset,
                        &mut NoiseRng::new(noise_idum),
                        wide,
                    ),
                    NoiseStream::Parallel => nanobragg_core::noise::noise_image_parallel(
                        image,
                        fp,
                        sp,
                        roi,
                        o.adc_offset,
                        PixelStream { seed: noise_idum.wrapping_neg(), first_pixel: 0 },
                        wide,
                    ),
                };
                let photons = nanobragg_io::cfmt::f(noise.photons, 0);
                writeln!(out, "{photons} photons on noise image ({} overloads)", noise.overloads)?;
                if wide {
                    pixels32 = Some(wide_pixels);
                }
                noise.pixels
            }
            Some(response) => {
                let calib_idum = o.response.calib_seed.map_or(NOISIFY_CALIB_IDUM, |s| -s);
                // the PSF spreads light within each panel
                let noisy = match o.noise_rng {
                    NoiseStream::C => {
                        let mut seeds = SharedSeeds::new(noise_idum, calib_idum);
                        noisy_image_tiled(image, &exp.layout, &response, &mut seeds)
                    }
                    NoiseStream::Parallel => noisy_image_parallel(
                        image,
                        &exp.layout,
                        &response,
                        PixelStream { seed: noise_idum.wrapping_neg(), first_pixel: 0 },
                        calib_idum.wrapping_neg(),
                    ),
                };
                if let Some(before) = noisy.photons_before_psf {
                    writeln!(
                        out,
                        "{} photons on noise image before PSF",
                        nanobragg_io::cfmt::f(before, 0)
                    )?;
                    for (psf, name) in noisy.psf.iter().zip(&exp.names) {
                        if let Some(name) = name {
                            writeln!(out, "  panel {name}:")?;
                        }
                        report_psf(psf, out)?;
                    }
                }
                let photons = nanobragg_io::cfmt::f(noisy.photons, 0);
                writeln!(out, "{photons} photons on noise image ({} overloads)", noisy.overloads)?;
                if wide {
                    // 32-bit ADU clipped at 2^31 - 1; a negative count wrapped, as i32 it is back
                    pixels32 = Some(noisy.pixels32.iter().map(|&p| p as i32).collect());
                }
                if response.bits == Bits::U32 {
                    noise32 = Some(noisy.pixels32);
                }
                noisy.pixels16
            }
        };
        if let Some(file) = files.noise {
            let pixels = match &noise32 {
                Some(p32) => {
                    writeln!(out, "writing {} as 4-byte integers", o.noisefile.display())?;
                    SmvPixels::U32(p32)
                }
                None => {
                    writeln!(out, "writing {} as 2-byte integers", o.noisefile.display())?;
                    SmvPixels::U16(&pixels)
                }
            };
            let header = match o.noise_rng {
                // (the C stream's header stays nanoBragg.c's)
                NoiseStream::C => smv_header(plan),
                NoiseStream::Parallel => {
                    parallel_noise_header(smv_header(plan), noise_idum.wrapping_neg())
                }
            };
            image_writer::write(file, Image::Smv(&header, pixels))
                .map_err(|e| write_error("-noisefile", e))?;
        }
    }
    if let Some(pixels) = &pixels32 {
        // each panel's pixels in one piece
        let parts: Vec<_> = (0..exp.plans.len()).map(|k| exp.layout.piece(k, pixels)).collect();
        let with_pixels: Vec<(&Plan, &[i32])> =
            exp.plans.iter().zip(parts.iter().map(|v| &v[..])).collect();
        let img = mx_image(plan, &with_pixels, o, true);
        if let Some(file) = files.nxmx {
            writeln!(out, "writing {} as NXmx (HDF5) with 4-byte integers", shown(&o.nxmxfile))?;
            image_writer::write(file, Image::Nxmx(&img, o.nxmx_compression))
                .map_err(|e| write_error("-nxmxfile", e))?;
        }
        if let Some(file) = files.cbf {
            writeln!(out, "writing {} as miniCBF with 4-byte integers", shown(&o.cbffile))?;
            image_writer::write(file, Image::Cbf(&img)).map_err(|e| write_error("-cbffile", e))?;
        }
    }
    if let (Some(frame), Some(pixels)) = (files.frame, pixels32) {
        *frame = pixels;
    }
    Ok(())
}

/// The most bytes the file of output `flag` (`-floatfile`, `-intfile`,
/// `-noisefile`, `-pgmfile`, `-nxmxfile`, `-cbffile`) takes for one image
/// of `plan`: what the free-space check before a batch or series counts.
pub fn file_bytes(flag: &str, plan: &Plan) -> u64 {
    let d = &plan.detector;
    let pixels = (d.fpixels * d.spixels) as u64;
    match flag {
        "-floatfile" => 4 * pixels,
        // (the header's scale takes at most a few dozen bytes)
        "-pgmfile" => pixels + 128,
        // int32 pixels: uncompressed in NXmx; at most 5 bytes each with
        // CBF's byte_offset below 32767 counts (15 in the worst case, which
        // a simulated image does not reach), and the headers
        "-nxmxfile" => 4 * pixels + 65536,
        "-cbffile" => 5 * pixels + 8192,
        _ => smv_header(plan).bytes(nanobragg_io::smv::SmvType::U16).len() as u64 + 2 * pixels,
    }
}

/// An optional output's name as the run's lines show it.
fn shown(path: &Option<std::path::PathBuf>) -> std::path::Display<'_> {
    path.as_deref().unwrap_or(Path::new("")).display()
}
