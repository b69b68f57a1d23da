// What the binding's files share: failed Status values crossing into Python
// (core.cc registers the translator that raises kvfabric/errors.py's class
// for each code), and the functions that add each file's classes.
#pragma once

#include <nanobind/nanobind.h>

#include "kvfabric/status.h"

namespace kvfabric::python {

// A failed Status crossing into Python.
struct StatusError {
  Status status;
};

inline void Check(const Status& s) {
  if (!s.ok()) throw StatusError{s};
}

// kvfabric._native.WeightSync (weights.cc).
void BindWeights(nanobind::module_& m);

}  // namespace kvfabric::python
