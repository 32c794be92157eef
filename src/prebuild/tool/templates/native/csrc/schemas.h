// Every op schema, once: registered as ${namespace}:: (library.cpp) and as ${namespace}_simt::
// (simt/library_simt.cpp), so the tests call both backends through one signature.
#pragma once

namespace ${namespace} {

template <typename Library>
void define_ops(Library& m) {
  m.def("scale_add(Tensor x, Tensor y, float alpha) -> Tensor");
}

}  // namespace ${namespace}
