//! The headers of a render's image files: the SMV header of a plan and the
//! int32 image (geometry, beam, sensor, the spectrum as rendered) that
//! NXmx and miniCBF files describe.

use crate::invocation::Outputs;
use nanobragg_core::geometry::Detector;
use nanobragg_core::setup::Plan;
use nanobragg_io::mx::{utc_iso8601, MxImage, Panel};
use nanobragg_io::smv::{SmvHeader, SmvHeaderFields};

/// The SMV header of a render's integer images (nanoBragg.c's keys).
pub fn smv_header(plan: &Plan) -> SmvHeader {
    SmvHeader::from(&smv_fields(plan))
}

/// nanoBragg.c's SMV header values of `plan`'s image.
fn smv_fields(plan: &Plan) -> SmvHeaderFields {
    let d = &plan.detector;
    SmvHeaderFields {
        fpixels: d.fpixels,
        spixels: d.spixels,
        pixel_size_mm: d.pixel_size_m * 1000.0,
        distance_mm: d.distance_m * 1000.0,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        beam_center_x_mm: d.xbeam_m * 1000.0,
        beam_center_y_mm: d.ybeam_m * 1000.0,
        adxv_center_x_mm: d.fbeam_m * 1000.0,
        adxv_center_y_mm: (d.detsize_s_m - d.sbeam_m) * 1000.0,
        mosflm_center_x_mm: (d.sbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        mosflm_center_y_mm: (d.fbeam_m - 0.5 * d.pixel_size_m) * 1000.0,
        denzo_x_beam_mm: (d.sbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        denzo_y_beam_mm: (d.fbeam_m - 0.0 * d.pixel_size_m) * 1000.0,
        dials_origin_mm: d.dials_origin_mm,
        xds_orgx: d.orgx,
        xds_orgy: d.orgy,
        close_distance_mm: d.close_distance_m * 1000.0,
        phi_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_start_deg: plan.phi0_rad * nanobragg_core::units::RTD,
        osc_range_deg: plan.osc_rad * nanobragg_core::units::RTD,
        twotheta_deg: d.twotheta_rad * nanobragg_core::units::RTD,
    }
}

/// The saturation value of the int32 images: their clip.
pub const SATURATION_I32: i32 = i32::MAX;

/// The spectrum as rendered: (wavelength Å, weight), each source counting
/// its weight where the render weights them, else once.
pub fn plan_spectrum(plan: &Plan) -> Vec<(f64, f64)> {
    let mut spectrum_a: Vec<(f64, f64)> = Vec::new();
    // each wavelength's place in the list, in the order of first appearance
    // (a lookup per source: a spectrum of 10⁶ lines stays linear)
    let mut index: std::collections::HashMap<u64, usize> =
        std::collections::HashMap::with_capacity(plan.sources.list.len());
    for s in &plan.sources.list {
        let lambda_a = s.lambda_m * 1e10;
        // (each source counts once where the render does not weight them)
        let weight = if plan.sources.weighted { s.weight } else { 1.0 };
        // (+0.0 and -0.0 are one wavelength, as == has them)
        let key = (lambda_a + 0.0).to_bits();
        match index.entry(key) {
            std::collections::hash_map::Entry::Occupied(at) => spectrum_a[*at.get()].1 += weight,
            std::collections::hash_map::Entry::Vacant(at) => {
                at.insert(spectrum_a.len());
                spectrum_a.push((lambda_a, weight));
            }
        }
    }
    if spectrum_a.is_empty() {
        spectrum_a.push((plan.lambda0_m * 1e10, 1.0));
    }
    spectrum_a
}

/// The int32 image of this run, each panel with its pixels, with its
/// geometry and values, for the NXmx and CBF writers (the detector-wide
/// values, distance and beam centre, are `plan`'s).
pub fn mx_image<'a>(plan: &Plan, panels: &[(&Detector, &'a [i32])], o: &Outputs) -> MxImage<'a> {
    use nanobragg_core::units::RTD;
    let d = &plan.detector;
    let spectrum_a = plan_spectrum(plan);
    // pixels cannot be negative without a negative offset or read-out noise:
    // then -1 marks an invalid pixel, as on Pilatus detectors; else no value does
    let underload_value =
        if !o.calculate_noise || (o.adc_offset >= 0.0 && o.response.readout_noise <= 0.0) {
            -1
        } else {
            i32::MIN
        };
    let start = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |t| t.as_secs());
    let end = start + plan.exposure_s.max(0.0).round() as u64;
    MxImage {
        panels: panels
            .iter()
            .map(|&(p, pixels)| Panel {
                origin_m: p.pix0,
                fast: p.fdet,
                slow: p.sdet,
                pixel_size_m: p.pixel_size_m,
                fpixels: p.fpixels,
                spixels: p.spixels,
                pixels,
            })
            .collect(),
        beam: d.beam,
        polar: d.polar,
        spindle: d.spindle,
        wavelength_a: plan.sources.central_lambda_m * 1e10,
        spectrum_a,
        kahn_factor: plan.kahn_factor,
        distance_m: d.distance_m,
        beam_centre_px: [d.fbeam_m / d.pixel_size_m, d.sbeam_m / d.pixel_size_m],
        exposure_s: plan.exposure_s,
        phi_start_deg: plan.phi0_rad * RTD,
        phi_range_deg: plan.osc_rad * RTD,
        saturation_value: SATURATION_I32,
        underload_value,
        sensor_material: "Si".into(),
        sensor_thickness_m: d.thick_m,
        start_time: utc_iso8601(start),
        end_time: utc_iso8601(end),
    }
}
