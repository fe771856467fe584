//! The few HDF5 objects NXmx files are made of, written through the pure-Rust
//! `rust-hdf5` crate (no C library): groups with an `NX_class`, scalar and
//! one-dimensional datasets with their units, NXtransformations axes, and
//! frame datasets, one frame a chunk, with an optional [`Compression`].
//!
//! Texts are scalar fixed-length UTF-8 strings in datasets (as detector
//! vendors write them; h5py reads them as bytes) and variable-length UTF-8
//! strings in attributes (h5py reads them as `str`).

use std::path::Path;

use rust_hdf5::format::messages::datatype::DatatypeMessage;
use rust_hdf5::format::messages::filter::FilterPipeline;
use rust_hdf5::types::VarLenUnicode;
use rust_hdf5::{H5Dataset, H5Group, H5Type};

use crate::IoError;

/// What every HDF5 call here returns.
pub(crate) type H5<T> = rust_hdf5::Result<T>;

/// How the frames of an NXmx file are stored: one frame a chunk, filtered or
/// not. Every choice is read by h5py and DIALS; bitshuffle-LZ4 (filter
/// 32008, the Eiger convention) needs the `hdf5plugin` package there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// The pixels as they are (the default).
    #[default]
    None,
    /// gzip (HDF5 filter 1) at `level` 1–9.
    Deflate {
        /// zlib's compression level, 1 (fastest) to 9 (smallest).
        level: u32,
    },
    /// Bit transpose and LZ4 blocks (HDF5 filter 32008, compression 2).
    BitshuffleLz4,
}

impl Compression {
    /// The names [`Self::parse`] takes, for messages and help.
    pub const NAMES: &'static str = "none, deflate, deflate:LEVEL (1-9; deflate is 4) or bslz4";

    /// `none`, `deflate` (level 4, h5py's default), `deflate:LEVEL` or
    /// `bslz4`; `None` for anything else.
    pub fn parse(name: &str) -> Option<Compression> {
        match name {
            "none" => Some(Compression::None),
            "deflate" | "gzip" => Some(Compression::Deflate { level: 4 }),
            "bslz4" | "bitshuffle-lz4" => Some(Compression::BitshuffleLz4),
            _ => {
                let level = name.strip_prefix("deflate:").or_else(|| name.strip_prefix("gzip:"))?;
                match level.parse::<u32>() {
                    Ok(level @ 1..=9) => Some(Compression::Deflate { level }),
                    _ => None,
                }
            }
        }
    }

    /// The filters of one chunk of `element_size`-byte values.
    fn pipeline(self, element_size: u32) -> Option<FilterPipeline> {
        match self {
            Compression::None => None,
            Compression::Deflate { level } => Some(FilterPipeline::deflate(level)),
            Compression::BitshuffleLz4 => Some(FilterPipeline::bshuf_lz4(element_size)),
        }
    }
}

/// An HDF5 error as an [`IoError`] naming `path`.
pub(crate) fn error(path: &Path) -> impl Fn(rust_hdf5::Hdf5Error) -> IoError + '_ {
    move |e| IoError::InvalidInput { path: path.to_path_buf(), reason: format!("HDF5: {e}") }
}

/// A variable-length UTF-8 string attribute of a dataset.
pub(crate) fn attr_text(ds: &H5Dataset, name: &str, value: &str) -> H5<()> {
    ds.new_attr::<VarLenUnicode>()
        .shape(())
        .create(name)?
        .write_scalar(&VarLenUnicode(value.into()))
}

/// A child group with its `NX_class`.
pub(crate) fn group(parent: &H5Group, name: &str, class: &str) -> H5<H5Group> {
    let g = parent.create_group(name)?;
    g.set_attr_string("NX_class", class)?;
    Ok(g)
}

/// A scalar text dataset (fixed-length UTF-8, null-padded; an empty text is
/// one null byte, since HDF5 has no string of length 0).
pub(crate) fn text(g: &H5Group, name: &str, value: &str) -> H5<H5Dataset> {
    let mut bytes = value.as_bytes().to_vec();
    if bytes.is_empty() {
        bytes.push(0);
    }
    let datatype =
        DatatypeMessage::FixedString { size: bytes.len() as u32, padding: 1, charset: 1 };
    let ds = g.new_dataset::<u8>().datatype(datatype).scalar().create(name)?;
    ds.write_raw_bytes(&bytes)?;
    Ok(ds)
}

/// A scalar number with its units.
pub(crate) fn number(g: &H5Group, name: &str, value: f64, units: Option<&str>) -> H5<H5Dataset> {
    let ds = g.new_dataset::<f64>().scalar().create(name)?;
    ds.write_raw(&[value])?;
    if let Some(u) = units {
        attr_text(&ds, "units", u)?;
    }
    Ok(ds)
}

/// A scalar integer.
pub(crate) fn integer(g: &H5Group, name: &str, value: i32) -> H5<()> {
    g.new_dataset::<i32>().scalar().create(name)?.write_raw(&[value])
}

/// A dataset of `values` in `shape` (row-major), with its units.
pub(crate) fn array_nd<T: H5Type>(
    g: &H5Group,
    name: &str,
    shape: &[usize],
    values: &[T],
    units: Option<&str>,
) -> H5<()> {
    let ds = g.new_dataset::<T>().shape(shape).create(name)?;
    ds.write_raw(values)?;
    if let Some(u) = units {
        attr_text(&ds, "units", u)?;
    }
    Ok(())
}

/// A one-dimensional dataset with its units.
pub(crate) fn array<T: H5Type>(
    g: &H5Group,
    name: &str,
    values: &[T],
    units: Option<&str>,
) -> H5<()> {
    array_nd(g, name, &[values.len()], values, units)
}

/// An NXtransformations axis: a scalar `value` along `vector`, after the
/// axis `depends_on` (`.`: none).
pub(crate) fn axis(
    g: &H5Group,
    name: &str,
    value: f64,
    units: &str,
    kind: &str,
    vector: [f64; 3],
    depends_on: &str,
) -> H5<()> {
    let ds = g.new_dataset::<f64>().scalar().create(name)?;
    ds.write_raw(&[value])?;
    axis_attrs(&ds, units, kind, vector, depends_on)
}

/// The attributes that make `ds` an NXtransformations axis.
pub(crate) fn axis_attrs(
    ds: &H5Dataset,
    units: &str,
    kind: &str,
    vector: [f64; 3],
    depends_on: &str,
) -> H5<()> {
    attr_text(ds, "units", units)?;
    attr_text(ds, "transformation_type", kind)?;
    ds.new_attr::<f64>().shape([3]).create("vector")?.write_array(&vector)?;
    ds.new_attr::<f64>().shape([3]).create("offset")?.write_array(&[0.0; 3])?;
    // offsets are lengths even on a rotation axis
    attr_text(ds, "offset_units", if units == "deg" { "m" } else { units })?;
    attr_text(ds, "depends_on", depends_on)
}

/// Dataset `name` of `group` of `shape`, frames along its first axis, one
/// frame a chunk, stored as `compression` says.
pub(crate) fn frames_dataset<T: H5Type>(
    group: &H5Group,
    name: &str,
    shape: &[usize],
    compression: Compression,
) -> H5<H5Dataset> {
    let mut chunk = shape.to_vec();
    chunk[0] = 1;
    let builder = group.new_dataset::<T>().shape(shape).chunk(&chunk);
    let builder = match compression.pipeline(T::element_size() as u32) {
        Some(p) => builder.filter_pipeline(p),
        None => builder,
    };
    builder.create(name)
}

/// A dataset of `shape` holding `values` (row-major) in one chunk, deflated:
/// a pixel mask, mostly zeros, stored in a few kilobytes.
pub(crate) fn deflated<T: H5Type>(
    group: &H5Group,
    name: &str,
    shape: &[usize],
    values: &[T],
) -> H5<()> {
    let ds = group
        .new_dataset::<T>()
        .shape(shape)
        .chunk(shape)
        .filter_pipeline(FilterPipeline::deflate(4))
        .create(name)?;
    ds.write_raw(values)
}

/// Writes frame `k` (row-major, one whole chunk) of a dataset made by
/// [`frames_dataset`].
pub(crate) fn write_frame<T: H5Type>(ds: &H5Dataset, k: usize, values: &[T]) -> H5<()> {
    let frame = &ds.shape()[1..];
    let starts: Vec<usize> = std::iter::once(k).chain(frame.iter().map(|_| 0)).collect();
    let counts: Vec<usize> = std::iter::once(1).chain(frame.iter().copied()).collect();
    ds.write_slice(&starts, &counts, values)
}
