//! The resolved detector: pixel grid, orientation, origin and sensor layers.

use crate::config::{Convention, DetectorConfig, Pivot};
use crate::error::{Error, Result, Warning};
use crate::geometry::convention::Axes;
use crate::param::{Deltas, Param};
use crate::real::DiffReal;
use crate::units::{mm_to_m, RTD};
use crate::vec3::{cross, dot, lift, rotate_axis, rotate_xyz, unitize, V3};

/// Detector geometry after conventions, pivots and rotations are applied (SI units).
#[derive(Debug, Clone, PartialEq)]
pub struct Detector {
    /// Convention in force.
    pub convention: Convention,
    /// Pivot in force (after the convention forced one).
    pub pivot: Pivot,
    /// Pixels along the fast axis.
    pub fpixels: usize,
    /// Pixels along the slow axis.
    pub spixels: usize,
    /// Pixel edge (m).
    pub pixel_size_m: f64,
    /// Detector width along fast (m).
    pub detsize_f_m: f64,
    /// Detector height along slow (m).
    pub detsize_s_m: f64,
    /// Fast axis (unit) after rotations.
    pub fdet: [f64; 3],
    /// Slow axis (unit) after rotations.
    pub sdet: [f64; 3],
    /// Normal (unit) after rotations.
    pub odet: [f64; 3],
    /// Vector from the sample to the corner of the first pixel (m).
    pub pix0: [f64; 3],
    /// Beam direction (unit).
    pub beam: [f64; 3],
    /// Polarization E-vector (unit).
    pub polar: [f64; 3],
    /// beam × polar (unit): the "vertical" divergence axis.
    pub vert: [f64; 3],
    /// Spindle axis (unit).
    pub spindle: [f64; 3],
    /// Two-theta axis (as given; nanoBragg.c does not normalise it).
    pub twotheta_axis: [f64; 3],
    /// Sample-to-beam-spot distance along the beam (m).
    pub distance_m: f64,
    /// Sample-to-detector-plane distance (m).
    pub close_distance_m: f64,
    /// Beam centre written to the header (m), convention-specific meaning.
    pub xbeam_m: f64,
    /// Beam centre written to the header (m).
    pub ybeam_m: f64,
    /// Direct-beam spot along fast from the first pixel's corner (m).
    pub fbeam_m: f64,
    /// Direct-beam spot along slow (m).
    pub sbeam_m: f64,
    /// Closest point as given or defaulted (m).
    pub xclose_m: f64,
    /// Closest point as given or defaulted (m).
    pub yclose_m: f64,
    /// Closest point along fast after rotations (m).
    pub fclose_m: f64,
    /// Closest point along slow after rotations (m).
    pub sclose_m: f64,
    /// XDS ORGX (pixels).
    pub orgx: f64,
    /// XDS ORGY (pixels).
    pub orgy: f64,
    /// DIALS origin (mm).
    pub dials_origin_mm: [f64; 3],
    /// Beam direction in detector (f, s, o) coordinates, as XDS wants it.
    pub xds_incident: [f64; 3],
    /// Two-theta angle (rad).
    pub twotheta_rad: f64,
    /// `-curved_det`.
    pub curved: bool,
    /// `-point_pixel`.
    pub point_pixel: bool,
    /// Region of interest (inclusive pixel bounds): xmin, xmax, ymin, ymax.
    pub roi: [i64; 4],
    /// Total sensor thickness (m).
    pub thick_m: f64,
    /// Thickness of one sensor layer (m).
    pub thickstep_m: f64,
    /// Number of sensor layers.
    pub thicksteps: usize,
    /// Attenuation coefficient (1/m).
    pub mu_per_m: f64,
    /// Messages nanoBragg.c prints as warnings while resolving the detector.
    pub warnings: Vec<Warning>,
}

/// The parts of the detector geometry that parameters move, in the number
/// type of [`Detector::resolve_in`] (the [`Detector`] holds their values).
#[derive(Debug, Clone, Copy)]
pub struct Placement<R> {
    /// Fast axis after rotations.
    pub fdet: V3<R>,
    /// Slow axis after rotations.
    pub sdet: V3<R>,
    /// Normal after rotations.
    pub odet: V3<R>,
    /// Sample to the first pixel's corner (m).
    pub pix0: V3<R>,
    /// Sample to beam spot along the beam (m).
    pub distance: R,
    /// Sample to detector plane (m).
    pub close_distance: R,
}

/// Bytes each detector pixel needs at a run's peak: the f32 float image, the
/// u16 integer image, the u8 PGM image, the u16 noise image, and the 2-byte
/// encoded pixels of the SMV file being written.
pub const BYTES_PER_PIXEL: u128 = 4 + 2 + 1 + 2 + 2;

fn nan_or(x: Option<f64>) -> f64 {
    x.unwrap_or(f64::NAN)
}

/// The pixel grid: pixel edge and detector size (m), pixels along fast and slow.
struct PixelGrid {
    pixel_size: f64,
    detsize_f: f64,
    detsize_s: f64,
    fpixels: usize,
    spixels: usize,
}

impl PixelGrid {
    /// `-pixel`, `-detpixels` and `-detsize` as nanoBragg.c combines them.
    fn resolve(cfg: &DetectorConfig) -> Result<PixelGrid> {
        let pixel_size = mm_to_m(cfg.pixel_mm);
        if !(pixel_size > 0.0 && pixel_size.is_finite()) {
            return Err(Error::Invalid {
                what: "-pixel",
                msg: format!("pixel size {} mm must be positive", cfg.pixel_mm),
            });
        }
        if cfg.fpixels < 0 || cfg.spixels < 0 {
            return Err(Error::Invalid {
                what: "-detpixels",
                msg: "pixel counts must be positive".into(),
            });
        }
        let mut detsize_f = mm_to_m(cfg.detsize_f_mm);
        let mut detsize_s = mm_to_m(cfg.detsize_s_mm);
        if cfg.fpixels != 0 {
            detsize_f = pixel_size * cfg.fpixels as f64;
        }
        if cfg.spixels != 0 {
            detsize_s = pixel_size * cfg.spixels as f64;
        }
        let fp = (detsize_f / pixel_size - 0.5).ceil();
        let sp = (detsize_s / pixel_size - 0.5).ceil();
        if !(fp >= 1.0 && sp >= 1.0 && fp.is_finite() && sp.is_finite()) {
            return Err(Error::Invalid {
                what: "-detsize",
                msg: format!("detector of {fp} x {sp} pixels has no pixels"),
            });
        }
        if fp * sp > (i32::MAX as f64) {
            return Err(Error::TooLarge {
                what: format!("a {fp} x {sp} pixel detector (-detpixels/-detsize)"),
                bytes: (fp * sp) as u128 * BYTES_PER_PIXEL,
            });
        }
        Ok(PixelGrid {
            pixel_size,
            detsize_f,
            detsize_s,
            fpixels: fp as usize,
            spixels: sp as usize,
        })
    }

    /// The region of interest, unset bounds at the detector's edges.
    fn roi(&self, cfg: &DetectorConfig) -> [i64; 4] {
        let mut roi = cfg.roi.unwrap_or([-1, -1, -1, -1]);
        if roi[0] < 0 {
            roi[0] = 0;
        }
        if roi[1] < 0 {
            roi[1] = self.fpixels as i64;
        }
        if roi[2] < 0 {
            roi[2] = 0;
        }
        if roi[3] < 0 {
            roi[3] = self.spixels as i64;
        }
        roi
    }
}

/// The beam centre as given or defaulted (m), and the direct-beam spot and
/// closest point on the detector (m from the first pixel's corner) in `R`.
struct BeamCentre<R> {
    xbeam: f64,
    ybeam: f64,
    xclose: f64,
    yclose: f64,
    fbeam: R,
    sbeam: R,
    fclose: R,
    sclose: R,
    pivot: Pivot,
}

impl<R: DiffReal> BeamCentre<R> {
    /// `-Xbeam`/`-Ybeam`, `-Xclose`/`-Yclose` and `-ORGX`/`-ORGY` in the
    /// convention's meaning, with the beam-centre parameters of `deltas`.
    fn resolve(cfg: &DetectorConfig, g: &PixelGrid, deltas: &Deltas<R>) -> BeamCentre<R> {
        let c = R::c;
        let pixel_size = g.pixel_size;
        let mut xbeam = nan_or(cfg.xbeam_mm.map(mm_to_m));
        let mut ybeam = nan_or(cfg.ybeam_mm.map(mm_to_m));
        let or_if_nan = |x: f64, default: f64| if x.is_nan() { default } else { x };
        let at_px = |px: Option<f64>| nan_or(px.map(|p| (p - 0.5) * pixel_size));
        let fclose = or_if_nan(at_px(cfg.orgx_px), (g.detsize_f - 0.0 * pixel_size) / 2.0);
        let sclose = or_if_nan(at_px(cfg.orgy_px), (g.detsize_s + 0.0 * pixel_size) / 2.0);
        let xclose = or_if_nan(nan_or(cfg.xclose_mm.map(mm_to_m)), fclose);
        let yclose = or_if_nan(nan_or(cfg.yclose_mm.map(mm_to_m)), sclose);
        let (mut fclose, mut sclose) = (c(fclose), c(sclose));
        let given = |p: Param, x: f64| deltas.apply(p, c(x), 1e-3);
        let (fbeam, sbeam, pivot);
        match cfg.convention {
            Convention::Adxv => {
                if xbeam.is_nan() {
                    xbeam = (g.detsize_f + pixel_size) / 2.0;
                }
                if ybeam.is_nan() {
                    ybeam = (g.detsize_s - pixel_size) / 2.0;
                }
                fbeam = given(Param::Xbeam, xbeam);
                sbeam = c(g.detsize_s) - given(Param::Ybeam, ybeam);
                pivot = Pivot::Beam;
            }
            Convention::Mosflm | Convention::Denzo => {
                if xbeam.is_nan() {
                    xbeam = (g.detsize_s + pixel_size) / 2.0;
                }
                if ybeam.is_nan() {
                    ybeam = (g.detsize_f + pixel_size) / 2.0;
                }
                let shift = if cfg.convention == Convention::Mosflm { 0.5 } else { 0.0 };
                fbeam = given(Param::Ybeam, ybeam) + c(shift * pixel_size);
                sbeam = given(Param::Xbeam, xbeam) + c(shift * pixel_size);
                pivot = Pivot::Beam;
            }
            Convention::Xds | Convention::Dials | Convention::Custom => {
                if xbeam.is_nan() {
                    xbeam = xclose;
                }
                if ybeam.is_nan() {
                    ybeam = yclose;
                }
                fbeam = given(Param::Xbeam, xbeam);
                sbeam = given(Param::Ybeam, ybeam);
                if cfg.convention == Convention::Custom {
                    fclose = fbeam;
                    sclose = sbeam;
                    pivot = cfg.pivot;
                } else {
                    pivot = Pivot::Sample;
                }
            }
        }
        BeamCentre { xbeam, ybeam, xclose, yclose, fbeam, sbeam, fclose, sclose, pivot }
    }
}

/// The convention's (or the given) unit vectors before any rotation.
struct UnitAxes {
    beam: [f64; 3],
    fdet: [f64; 3],
    sdet: [f64; 3],
    odet: [f64; 3],
    polar: [f64; 3],
    spindle: [f64; 3],
    vert: [f64; 3],
    twotheta: [f64; 3],
}

impl UnitAxes {
    /// Normalise the axes (a normal that is not unit is replaced by fast ×
    /// slow, with a warning); refuse a zero-length beam, fast, slow or spindle.
    fn resolve(cfg: &DetectorConfig, warnings: &mut Vec<Warning>) -> Result<UnitAxes> {
        let axes = Axes::of(cfg.convention).unwrap_or(Axes {
            fdet: cfg.fdet,
            sdet: cfg.sdet,
            odet: cfg.odet,
            beam: cfg.beam,
            polar: cfg.polar,
            spindle: cfg.spindle,
            twotheta: cfg.twotheta_axis,
        });
        let (beam, _) = unitize(axes.beam);
        let (fdet, _) = unitize(axes.fdet);
        let (sdet, _) = unitize(axes.sdet);
        let (mut odet, omag) = unitize(axes.odet);
        if omag != 1.0 {
            warnings.push(Warning::AutoOdetVector);
            odet = unitize(cross(fdet, sdet)).0;
        }
        let (polar, _) = unitize(axes.polar);
        let (spindle, _) = unitize(axes.spindle);
        let (vert, _) = unitize(cross(beam, polar));
        for (name, v) in [
            ("-beam_vector", beam),
            ("-fdet_vector", fdet),
            ("-sdet_vector", sdet),
            ("-spindle_axis", spindle),
        ] {
            if v == [0.0; 3] {
                return Err(Error::Invalid { what: name, msg: "vector has zero length".into() });
            }
        }
        // pixels laid out along one line have no area and no plane to place
        if crate::vec3::magnitude(cross(fdet, sdet)) < 1e-9 {
            return Err(Error::Invalid {
                what: "-fdet_vector/-sdet_vector",
                msg: format!(
                    "the fast axis ({} {} {}) and the slow axis ({} {} {}) are parallel: the detector has no plane",
                    fdet[0], fdet[1], fdet[2], sdet[0], sdet[1], sdet[2]
                ),
            });
        }
        Ok(UnitAxes { beam, fdet, sdet, odet, polar, spindle, vert, twotheta: axes.twotheta })
    }
}

/// Sensor layers: total thickness (m), layer thickness (m), layer count and
/// attenuation coefficient (1/m).
struct Layers {
    thick: f64,
    thickstep: f64,
    thicksteps: usize,
    mu: f64,
}

impl Layers {
    /// `-thick`, `-thicksteps` and `-attenuation` as nanoBragg.c resolves them
    /// (`corrected`: N layers given with a thickness T are T/N thick, not
    /// T/(N − 1), so that they add up to T).
    fn resolve(cfg: &DetectorConfig, corrected: bool, warnings: &mut Vec<Warning>) -> Layers {
        let mut thick = crate::units::um_to_m(cfg.thick_um);
        let mut mu = match cfg.attenuation_um {
            None => -1.0,
            Some(None) => 0.0,
            Some(Some(um)) => {
                if um == 0.0 {
                    0.0
                } else {
                    1.0 / (um * 1e-6)
                }
            }
        };
        let mut thickstep = -1.0f64;
        let mut thicksteps = cfg.thicksteps;
        if thicksteps <= 0 {
            if thick < 0.0 {
                if thickstep <= 0.0 {
                    thicksteps = 1;
                    thick = 0.0;
                    thickstep = 0.0;
                } else {
                    thick = thickstep;
                    thicksteps = 2;
                }
            } else if thickstep <= 0.0 {
                thicksteps = 2;
                thickstep = thick / thicksteps as f64;
            } else {
                thicksteps = (thick / thickstep).ceil() as i64;
            }
        } else if thick < 0.0 {
            if thickstep <= 0.0 {
                thick = 0.5e-6;
                thickstep = thick / thicksteps as f64;
            } else {
                thick = thickstep;
                thicksteps = 2;
            }
        } else if thickstep <= 0.0 {
            if corrected {
                thickstep = thick / thicksteps as f64;
            } else {
                if thicksteps <= 1 {
                    thicksteps = 2;
                }
                thickstep = thick / (thicksteps - 1) as f64;
            }
        }
        if thick > 0.0 && mu < 0.0 {
            mu = 1.0 / thick;
            warnings.push(Warning::AttenuationDepth(mu));
        }
        if thick <= 0.0 || thickstep <= 0.0 || thicksteps <= 0 {
            thicksteps = 1;
            thick = 0.0;
            thickstep = 0.0;
        }
        Layers { thick, thickstep, thicksteps: thicksteps as usize, mu }
    }
}

/// The detector rotated (`-detector_rot*`, `-twotheta`) about its pivot:
/// the placed axes and origin, the distances, and the two-theta angle (rad).
fn place<R: DiffReal>(
    cfg: &DetectorConfig,
    axes: &UnitAxes,
    centre: &BeamCentre<R>,
    deltas: &Deltas<R>,
) -> (Placement<R>, R) {
    let c = R::c;
    let deg = |p: Param, x: f64| deltas.apply(p, c(x), 1.0) / c(RTD);
    let rotx = deg(Param::DetectorRotX, cfg.rotx_deg);
    let roty = deg(Param::DetectorRotY, cfg.roty_deg);
    let rotz = deg(Param::DetectorRotZ, cfg.rotz_deg);
    let twotheta = deg(Param::Twotheta, cfg.twotheta_deg);
    let rotate = |v: V3<R>| rotate_xyz(v, rotx, roty, rotz);
    let mut distance = deltas.apply(Param::Distance, c(cfg.distance_mm), 1.0) / c(1000.0);
    let given_close = cfg.close_distance_mm.map(|mm| c(mm) / c(1000.0));
    let (beam, twotheta_axis): (V3<R>, V3<R>) = (lift(axes.beam), lift(axes.twotheta));
    let (fdet, sdet, odet): (V3<R>, V3<R>, V3<R>) =
        (lift(axes.fdet), lift(axes.sdet), lift(axes.odet));
    let mut ratio = dot(beam, rotate(odet));
    if ratio.val() == 0.0 {
        ratio = c(f64::MIN_POSITIVE);
    }
    let mut close_distance = given_close.unwrap_or_else(|| (ratio * distance).abs());
    close_distance = deltas.apply(Param::CloseDistance, close_distance, 1e-3);
    distance = close_distance / ratio;

    let mut pix0 = [R::zero(); 3];
    if centre.pivot == Pivot::Sample {
        for i in 0..3 {
            pix0[i] = -centre.fclose * fdet[i] - centre.sclose * sdet[i] + close_distance * odet[i];
        }
        pix0 = rotate(pix0);
        pix0 = rotate_axis(pix0, twotheta_axis, twotheta);
    }
    let fdet = rotate_axis(rotate(fdet), twotheta_axis, twotheta);
    let sdet = rotate_axis(rotate(sdet), twotheta_axis, twotheta);
    let odet = rotate_axis(rotate(odet), twotheta_axis, twotheta);
    if centre.pivot == Pivot::Beam {
        for i in 0..3 {
            pix0[i] = -centre.fbeam * fdet[i] - centre.sbeam * sdet[i] + distance * beam[i];
        }
    }
    let close_distance = dot(pix0, odet);
    let distance = close_distance / ratio;
    (Placement { fdet, sdet, odet, pix0, distance, close_distance }, twotheta)
}

/// A mask must cover the detector pixel for pixel.
fn check_mask(cfg: &DetectorConfig, g: &PixelGrid) -> Result<()> {
    match &cfg.mask {
        Some(mask) if mask.len() != g.fpixels * g.spixels => Err(Error::Invalid {
            what: "-mask",
            msg: format!(
                "the mask has {} pixels but the detector has {} x {} \
                 (the mask header sets the detector size; -img or -detpixels changed it)",
                mask.len(),
                g.fpixels,
                g.spixels
            ),
        }),
        _ => Ok(()),
    }
}

impl Detector {
    /// Resolve the detector the way nanoBragg.c does, in its order of steps.
    pub fn resolve(cfg: &DetectorConfig) -> Result<Detector> {
        Ok(Self::resolve_in::<f64>(cfg, &Deltas::zero(), false)?.0)
    }

    /// [`Detector::resolve`] in any number type, with the detector
    /// parameters of `deltas` added where they enter; the [`Placement`] holds
    /// the moved vectors in `R`. With all-zero deltas the f64 instance is
    /// [`Detector::resolve`].
    /// `corrected` (`-corrected`) makes the sensor layers add up to the
    /// thickness (see [`Layers::resolve`]).
    pub fn resolve_in<R: DiffReal>(
        cfg: &DetectorConfig,
        deltas: &Deltas<R>,
        corrected: bool,
    ) -> Result<(Detector, Placement<R>)> {
        let mut warnings = Vec::new();
        let g = PixelGrid::resolve(cfg)?;
        let centre = BeamCentre::resolve(cfg, &g, deltas);
        let roi = g.roi(cfg);
        let axes = UnitAxes::resolve(cfg, &mut warnings)?;
        let layers = Layers::resolve(cfg, corrected, &mut warnings);
        let (placement, twotheta) = place(cfg, &axes, &centre, deltas);
        let Placement { fdet, sdet, odet, pix0, distance, close_distance } = placement;
        let fclose = -dot(pix0, fdet).val();
        let sclose = -dot(pix0, sdet).val();
        // the direct-beam spot: where the beam meets the plane, from pix0
        let beam: V3<R> = lift(axes.beam);
        let nv: V3<R> = std::array::from_fn(|i| distance * beam[i] - pix0[i]);
        let fbeam = dot(fdet, nv).val();
        let sbeam = dot(sdet, nv).val();
        if !(distance.val().is_finite() && close_distance.val().is_finite()) {
            return Err(Error::Invalid {
                what: "detector geometry",
                msg: "the distance, beam centre and rotations (-distance/-close_distance, -Xbeam/-Ybeam/-Xclose/-Yclose/-ORGX/-ORGY, -detector_rot*, -twotheta) give a non-finite distance".into(),
            });
        }
        // The direct beam must meet the detector plane in front of the sample:
        // a normal perpendicular to the beam puts the beam spot at infinity,
        // one facing away puts the detector behind the sample.
        let facing = dot(axes.beam, odet.map(R::val));
        if facing > 1e-12 && close_distance.val() <= 0.0 {
            return Err(Error::Invalid {
                what: "detector geometry",
                msg: format!(
                    "the detector plane passes {} mm from the sample, behind it or through it \
                     (-distance/-close_distance with the beam centre and -twotheta give this)",
                    close_distance.val() * 1000.0
                ),
            });
        }
        if facing <= 1e-12 || facing.is_nan() {
            let angle = facing.clamp(-1.0, 1.0).acos() * RTD;
            return Err(Error::Invalid {
                what: "detector geometry",
                msg: format!(
                    "the detector does not face the beam: its normal is {angle:.3} deg from the beam \
                     (must be below 90; -twotheta {} with -detector_rotx/-detector_roty/-detector_rotz \
                     and -beam_vector/-odet_vector give this)",
                    cfg.twotheta_deg
                ),
            });
        }
        let (fdet, sdet, odet, pix0) =
            (fdet.map(R::val), sdet.map(R::val), odet.map(R::val), pix0.map(R::val));
        let beam = axes.beam;
        check_mask(cfg, &g)?;
        let detector = Detector {
            convention: cfg.convention,
            pivot: centre.pivot,
            fpixels: g.fpixels,
            spixels: g.spixels,
            pixel_size_m: g.pixel_size,
            detsize_f_m: g.detsize_f,
            detsize_s_m: g.detsize_s,
            fdet,
            sdet,
            odet,
            pix0,
            beam,
            polar: axes.polar,
            vert: axes.vert,
            spindle: axes.spindle,
            twotheta_axis: axes.twotheta,
            distance_m: distance.val(),
            close_distance_m: close_distance.val(),
            xbeam_m: centre.xbeam,
            ybeam_m: centre.ybeam,
            fbeam_m: fbeam,
            sbeam_m: sbeam,
            xclose_m: centre.xclose,
            yclose_m: centre.yclose,
            fclose_m: fclose,
            sclose_m: sclose,
            orgx: fclose / g.pixel_size + 0.5,
            orgy: sclose / g.pixel_size + 0.5,
            dials_origin_mm: [
                1000.0 * dot(pix0, [0.0, 0.0, 1.0]),
                1000.0 * dot(pix0, [0.0, 1.0, 0.0]),
                1000.0 * dot(pix0, [-1.0, 0.0, 0.0]),
            ],
            xds_incident: [dot(beam, fdet), dot(beam, sdet), dot(beam, odet)],
            twotheta_rad: twotheta.val(),
            curved: cfg.curved,
            point_pixel: cfg.point_pixel,
            roi,
            thick_m: layers.thick,
            thickstep_m: layers.thickstep,
            thicksteps: layers.thicksteps,
            mu_per_m: layers.mu,
            warnings,
        };
        Ok((detector, placement))
    }
}
