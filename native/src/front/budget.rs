//! Bytes of OTLP requests held at once across every receiver (`limits.max_bytes_in_flight`): the
//! Python receivers and the native gRPC front take from the one budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use pyo3::prelude::*;

#[derive(Debug)]
pub struct Budget {
    cap: usize,
    held: AtomicUsize,
}

impl Budget {
    pub fn new(cap: usize) -> Self {
        Budget {
            cap,
            held: AtomicUsize::new(0),
        }
    }

    /// Holds `size` more bytes, unless that would pass the cap while anything else is held (so one
    /// request of any size up to `max_request_bytes` is always admitted alone).
    pub fn reserve(&self, size: usize) -> bool {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
                (held == 0 || held + size <= self.cap).then_some(held + size)
            })
            .is_ok()
    }

    pub fn release(&self, size: usize) {
        self.held.fetch_sub(size, Ordering::AcqRel);
    }

    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }
}

/// Bytes one call holds, given back when it is dropped, whatever happens to the call.
pub struct Lease {
    budget: Arc<Budget>,
    size: usize,
}

impl Lease {
    pub fn take(budget: &Arc<Budget>, size: usize) -> Option<Lease> {
        let mut lease = Lease::none(budget);
        lease.grow(size).then_some(lease)
    }

    /// A lease of nothing yet, to grow as a body of unknown length arrives.
    pub fn none(budget: &Arc<Budget>) -> Lease {
        Lease {
            budget: budget.clone(),
            size: 0,
        }
    }

    /// Holds `more` bytes too; false, holding what it held, when the budget is at its cap.
    pub fn grow(&mut self, more: usize) -> bool {
        let grown = self.budget.reserve(more);
        if grown {
            self.size += more;
        }
        grown
    }

    pub fn size(&self) -> usize {
        self.size
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.budget.release(self.size);
    }
}

/// The budget, shared with Python (`sloscope.receivers.in_flight.InFlightBytes`).
#[pyclass(module = "sloscope._native", frozen)]
pub struct ByteBudget(pub Arc<Budget>);

#[pymethods]
impl ByteBudget {
    #[new]
    fn new(cap: usize) -> Self {
        ByteBudget(Arc::new(Budget::new(cap)))
    }

    fn reserve(&self, size: usize) -> bool {
        self.0.reserve(size)
    }

    fn release(&self, size: usize) {
        self.0.release(size)
    }

    #[getter]
    fn held(&self) -> usize {
        self.0.held()
    }

    #[getter]
    fn cap(&self) -> usize {
        self.0.cap
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refuses_past_its_cap_but_always_admits_one_alone() {
        let budget = Arc::new(Budget::new(100));
        let first = Lease::take(&budget, 150).expect("alone, over the cap");
        assert!(Lease::take(&budget, 1).is_none());
        drop(first);
        let second = Lease::take(&budget, 60).unwrap();
        let third = Lease::take(&budget, 40).unwrap();
        assert!(Lease::take(&budget, 1).is_none());
        assert_eq!(budget.held(), 100);
        drop((second, third));
        assert_eq!(budget.held(), 0);
    }
}
