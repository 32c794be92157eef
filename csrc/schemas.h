// Every op schema, once. The production library registers them under `prebuild`
// (library.cpp); the simt test library registers the same schemas under `prebuild_simt`
// (simt/library_simt.cpp), so tests call both backends through one signature.
// One header per op family holds its schemas.
#pragma once

#include "gsplat/covariance_schemas.h"
#include "gsplat/intersect_schemas.h"
#include "gsplat/pack_schemas.h"
#include "gsplat/projection_schemas.h"
#include "gsplat/rasterize_schemas.h"
#include "gsplat/relocation_schemas.h"
#include "gsplat/sh_schemas.h"
#include "ssim/ssim_schemas.h"

namespace prebuild {

template <typename Library>
void define_ops(Library& m) {
  ssim::define_ops(m);
  gsplat::define_covariance_ops(m);
  gsplat::define_projection_ops(m);
  gsplat::define_pack_ops(m);
  gsplat::define_intersect_ops(m);
  gsplat::define_rasterize_ops(m);
  gsplat::define_sh_ops(m);
  gsplat::define_relocation_ops(m);
}

}  // namespace prebuild
