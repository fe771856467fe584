//! The attributes of the model's objects: one table per object, each row a
//! name (the core config's field name, units in it), a line of help and
//! how the value goes to and from Python. The tables drive the keyword
//! constructors, attribute access, `repr` and `dir`.

use nanobragg_core::config::{Convention, CrystalShape, Misset, Pivot};
use pyo3::exceptions::{PyAttributeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyString, PyTuple};

/// One attribute of an object whose model is `C`.
pub struct Field<C: 'static> {
    /// The attribute's name.
    pub name: &'static str,
    /// What it is, with its unit.
    pub doc: &'static str,
    /// Its value as a Python object.
    pub get: fn(&C, Python<'_>) -> PyResult<Py<PyAny>>,
    /// Sets it from a Python object (a `TypeError` or `ValueError` naming
    /// the attribute when the object is not such a value).
    pub set: fn(&mut C, &Bound<'_, PyAny>) -> PyResult<()>,
}

/// A table row for `$place`, a field of `$c` of a type that is a [`Value`].
macro_rules! field {
    ($name:literal, $doc:literal, $c:ident => $place:expr) => {
        $crate::fields::Field {
            name: $name,
            doc: $doc,
            get: |$c, py| $crate::fields::Value::to_py(&$place, py),
            set: |$c, v| {
                $place = $crate::fields::Value::from_py(v)
                    .map_err(|e| $crate::fields::named($name, e))?;
                Ok(())
            },
        }
    };
}
pub(crate) use field;

/// `e` with the attribute it is about.
pub fn named(name: &str, e: PyErr) -> PyErr {
    Python::attach(|py| {
        let msg = format!("{name}: {}", e.value(py));
        match e.is_instance_of::<PyTypeError>(py) {
            true => PyTypeError::new_err(msg),
            false => PyValueError::new_err(msg),
        }
    })
}

/// A value an attribute holds, as Python sees it.
pub trait Value: Sized {
    /// The Python object of the value.
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>>;
    /// The value of a Python object.
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self>;
}

impl Value for f64 {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.into_pyobject(py)?.into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        let x: f64 = v.extract()?;
        match x.is_finite() {
            true => Ok(x),
            false => Err(PyValueError::new_err(format!("{x} is not a finite number"))),
        }
    }
}

impl Value for i64 {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.into_pyobject(py)?.into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        v.extract::<i64>().map_err(|e| match e.is_instance_of::<PyTypeError>(v.py()) {
            true => PyTypeError::new_err(format!("a whole number, not {}", type_name(v))),
            false => PyValueError::new_err(e.to_string()),
        })
    }
}

impl Value for usize {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(self.into_pyobject(py)?.into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        let n = i64::from_py(v)?;
        usize::try_from(n).map_err(|_| PyValueError::new_err(format!("{n} is negative")))
    }
}

impl Value for bool {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(pyo3::types::PyBool::new(py, *self).to_owned().into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        v.extract::<bool>()
            .map_err(|_| PyTypeError::new_err(format!("True or False, not {}", type_name(v))))
    }
}

impl Value for String {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        Ok(PyString::new(py, self).into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        v.extract::<String>().map_err(|_| PyTypeError::new_err("a string"))
    }
}

impl<T: Value> Value for Option<T> {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Some(v) => v.to_py(py),
            None => Ok(py.None()),
        }
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        match v.is_none() {
            true => Ok(None),
            false => T::from_py(v).map(Some),
        }
    }
}

/// The items of an iterable (a tuple, list or numpy array).
fn items<'py>(v: &Bound<'py, PyAny>) -> PyResult<Vec<Bound<'py, PyAny>>> {
    if v.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err("a sequence of numbers, not a string"));
    }
    let iter = v
        .try_iter()
        .map_err(|_| PyTypeError::new_err(format!("a sequence, not {}", type_name(v))))?;
    iter.collect()
}

impl<T: Value, const N: usize> Value for [T; N] {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let items = self.iter().map(|x| x.to_py(py)).collect::<PyResult<Vec<_>>>()?;
        Ok(PyTuple::new(py, items)?.into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        let items = items(v)?;
        if items.len() != N {
            return Err(PyValueError::new_err(format!("{N} values, not {}", items.len())));
        }
        let values = items.iter().map(T::from_py).collect::<PyResult<Vec<T>>>()?;
        Ok(values.try_into().unwrap_or_else(|_| unreachable!("N values")))
    }
}

impl<T: Value> Value for Vec<T> {
    /// A tuple: the value, not a view of it (`append` would change nothing).
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        let items = self.iter().map(|x| x.to_py(py)).collect::<PyResult<Vec<_>>>()?;
        Ok(PyTuple::new(py, items)?.into_any().unbind())
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        items(v)?.iter().map(T::from_py).collect()
    }
}

/// An enum as one of its words.
fn word<T: Copy + PartialEq>(v: &Bound<'_, PyAny>, words: &[(&'static str, T)]) -> PyResult<T> {
    let choices = || words.iter().map(|(w, _)| format!("{w:?}")).collect::<Vec<_>>().join(", ");
    let s: String = v
        .extract()
        .map_err(|_| PyTypeError::new_err(format!("one of {}, not {}", choices(), type_name(v))))?;
    let s = s.to_lowercase();
    words
        .iter()
        .find(|(w, _)| *w == s)
        .map(|&(_, t)| t)
        .ok_or_else(|| PyValueError::new_err(format!("{s:?}: one of {}", choices())))
}

fn word_of<T: Copy + PartialEq>(t: T, words: &[(&'static str, T)]) -> &'static str {
    words.iter().find(|(_, u)| *u == t).map(|(w, _)| *w).unwrap_or("?")
}

macro_rules! word_value {
    ($t:ty, $words:expr) => {
        impl Value for $t {
            fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
                Ok(PyString::new(py, word_of(*self, $words)).into_any().unbind())
            }
            fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
                word(v, $words)
            }
        }
    };
}

const CONVENTIONS: &[(&str, Convention)] = &[
    ("mosflm", Convention::Mosflm),
    ("xds", Convention::Xds),
    ("dials", Convention::Dials),
    ("adxv", Convention::Adxv),
    ("denzo", Convention::Denzo),
    ("custom", Convention::Custom),
];
word_value!(Convention, CONVENTIONS);
word_value!(Pivot, &[("beam", Pivot::Beam), ("sample", Pivot::Sample)]);
word_value!(
    CrystalShape,
    &[
        ("square", CrystalShape::Square),
        ("round", CrystalShape::Round),
        ("gauss", CrystalShape::Gauss),
        ("tophat", CrystalShape::Tophat),
    ]
);

impl Value for Misset {
    fn to_py(&self, py: Python<'_>) -> PyResult<Py<PyAny>> {
        match self {
            Misset::None => Ok(py.None()),
            Misset::Random => Ok(PyString::new(py, "random").into_any().unbind()),
            Misset::Angles(a) => a.to_py(py),
        }
    }
    fn from_py(v: &Bound<'_, PyAny>) -> PyResult<Self> {
        if v.is_none() {
            return Ok(Misset::None);
        }
        if let Ok(s) = v.extract::<String>() {
            return match s.as_str() {
                "random" => Ok(Misset::Random),
                _ => Err(PyValueError::new_err(format!(
                    "{s:?}: three angles (deg), \"random\" or None"
                ))),
            };
        }
        <[f64; 3]>::from_py(v).map(Misset::Angles)
    }
}

fn type_name(v: &Bound<'_, PyAny>) -> String {
    v.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
}

/// The row of `table` named `name`, or an `AttributeError` that names the
/// object and suggests the nearest name.
pub fn find<'t, C>(table: &'t [Field<C>], what: &str, name: &str) -> PyResult<&'t Field<C>> {
    table.iter().find(|f| f.name == name).ok_or_else(|| {
        let near = table
            .iter()
            .map(|f| (strsim(name, f.name), f.name))
            .filter(|&(d, _)| d <= 2 + name.len() / 4)
            .min_by_key(|&(d, _)| d);
        let hint = near.map_or(String::new(), |(_, n)| format!(" (did you mean {n:?}?)"));
        PyAttributeError::new_err(format!("{what} has no attribute {name:?}{hint}"))
    })
}

/// Edit distance, case-insensitive (the command line's suggestion metric).
fn strsim(a: &str, b: &str) -> usize {
    nanobragg_pipeline::flags::edit_distance(&a.to_lowercase(), &b.to_lowercase())
}

/// Sets every keyword of `kwargs` on `c` (a constructor's keywords).
pub fn set_keywords<C>(
    c: &mut C,
    table: &[Field<C>],
    what: &str,
    kwargs: Option<&Bound<'_, PyDict>>,
) -> PyResult<()> {
    for (k, v) in kwargs.into_iter().flatten() {
        let name: String = k.extract()?;
        let f = find(table, what, &name)
            .map_err(|e| PyTypeError::new_err(format!("{what}(): {}", e.value(k.py()))))?;
        (f.set)(c, &v)?;
    }
    Ok(())
}

/// `What(name=value, ...)` of the rows whose value differs from `default`'s
/// (every row without one), and of those `always` names; the rows `hidden`
/// names (parts of a value another row shows whole) are left out.
pub fn repr<C>(
    py: Python<'_>,
    what: &str,
    c: &C,
    default: Option<&C>,
    table: &[Field<C>],
    always: &[&str],
    hidden: &[&str],
) -> PyResult<String> {
    let mut parts = Vec::new();
    for f in table.iter().filter(|f| !hidden.contains(&f.name)) {
        let v = (f.get)(c, py)?;
        let differs = match default {
            Some(d) => !v.bind(py).eq((f.get)(d, py)?.bind(py))?,
            None => true,
        };
        if differs || always.contains(&f.name) {
            parts.push(format!("{}={}", f.name, v.bind(py).repr()?));
        }
    }
    Ok(format!("nanobragg.{what}({})", parts.join(", ")))
}

/// The names of `table` (for `dir`), with `extra`.
pub fn names<C>(table: &[Field<C>], extra: &[&str]) -> Vec<String> {
    table.iter().map(|f| f.name.to_string()).chain(extra.iter().map(|s| s.to_string())).collect()
}

/// The table as a help text: one line per attribute.
pub fn help<C>(table: &[Field<C>]) -> String {
    table.iter().map(|f| format!("{}: {}", f.name, f.doc)).collect::<Vec<_>>().join("\n")
}
