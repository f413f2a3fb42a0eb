//! The worker's calls as Python runs them: what [`airlock_supervisor::serve`] asks of the
//! worker runtime (`comfy_airlock/worker/runtime.py` passes `resolve` and `describe`).

use airlock_supervisor::Runner;
use airlock_wire::{RemoteException, Value};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::convert::decode;
use crate::lane::Lane;
use crate::worker::encode_plain;

pub(crate) struct PyRunner<'a, 'py> {
    py: Python<'py>,
    lane: &'a Bound<'py, Lane>,
    /// `resolve(target) -> callable` for `"module:qualname"`.
    resolve: &'a Bound<'py, PyAny>,
    /// `describe(exc, tb) -> (module, qualname, message, args, traceback)`.
    describe: &'a Bound<'py, PyAny>,
}

impl<'a, 'py> PyRunner<'a, 'py> {
    pub(crate) fn new(
        py: Python<'py>,
        lane: &'a Bound<'py, Lane>,
        resolve: &'a Bound<'py, PyAny>,
        describe: &'a Bound<'py, PyAny>,
    ) -> Self {
        PyRunner {
            py,
            lane,
            resolve,
            describe,
        }
    }
}

impl<'py> Runner for PyRunner<'_, 'py> {
    type Args = (Bound<'py, PyAny>, Bound<'py, PyAny>);
    type Target = Bound<'py, PyAny>;
    type Error = PyErr;

    fn blocking<T: Send>(&mut self, wait: impl FnOnce() -> T + Send) -> T {
        crate::exit_gate::detach(self.py, wait)
    }

    fn decode_args(&mut self, args: Value, kwargs: Value) -> PyResult<Self::Args> {
        Ok((
            decode(self.py, self.lane, args)?,
            decode(self.py, self.lane, kwargs)?,
        ))
    }

    fn resolve(&mut self, target: &str) -> PyResult<Bound<'py, PyAny>> {
        self.resolve.call1((target,))
    }

    fn invoke(&mut self, f: &Bound<'py, PyAny>, (args, kwargs): Self::Args) -> PyResult<Value> {
        let args = args.cast_into::<PyTuple>()?;
        let kwargs = kwargs.cast_into::<PyDict>()?;
        // The call's own large blocks are born in the pool while it runs (ADR 0044).
        crate::born::arm(true);
        let result = f.call(args, Some(&kwargs));
        crate::born::arm(false);
        encode_plain(self.lane, &result?)
    }

    fn describe(&mut self, err: PyErr) -> PyResult<RemoteException> {
        let py = self.py;
        let info = self.describe.call1((err.value(py), err.traceback(py)))?;
        let (module, qualname, message, args, traceback): (
            String,
            String,
            String,
            Bound<'_, PyTuple>,
            String,
        ) = info.extract()?;
        Ok(RemoteException {
            module,
            qualname,
            message,
            args: plain_args(&args),
            traceback,
        })
    }
}

/// Exception args that are plain scalars travel; anything else is left out (the message
/// carries `str(exc)` anyway).
fn plain_args(args: &Bound<'_, PyTuple>) -> Value {
    let mut out = Vec::new();
    for a in args.iter() {
        let v = if a.is_none() {
            Value::None
        } else if let Ok(b) = a.cast_exact::<pyo3::types::PyBool>() {
            Value::Bool(b.is_true())
        } else if let Some(i) = a
            .cast_exact::<pyo3::types::PyInt>()
            .ok()
            .and_then(|i| i.extract::<i64>().ok())
        {
            Value::Int(i)
        } else if let Ok(f) = a.cast_exact::<pyo3::types::PyFloat>() {
            Value::Float(f.value())
        } else if let Ok(s) = a.cast_exact::<pyo3::types::PyString>() {
            match s.to_str() {
                Ok(s) => Value::Str(s.to_owned()),
                Err(_) => return Value::Tuple(Vec::new()),
            }
        } else {
            return Value::Tuple(Vec::new());
        };
        out.push(v);
    }
    Value::Tuple(out)
}
