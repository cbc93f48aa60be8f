//! Where the options' axes lie in each variable: the patched axes (`patch`), the regions
//! `sel` cuts rows to, and this rank's part of each row under `model_parallel`.

use std::sync::Arc;

use super::assembly::Assembly;
use crate::engine::ArrayReader;
use crate::error::{Error, Result};
use crate::pass::{GatherVar, VarPart};
use crate::patch::{AxisPicks, PatchAxis, PatchOptions, PatchedDims, Patcher};

/// Where `options`' axes lie in the variable `label` read by `reader`: the patch dimensions
/// (positions among its inner dimensions), their names and lengths; `None` when it has none
/// of them. `what` says what the axes are for, in a refusal ("cut patches from").
///
/// # Errors
/// [`Error::Config`] when it has some of them only, a patched axis is its sample axis, or a
/// chunk transform changes its inner shape (the patch would not be where the names say).
fn patched_axes(options: &PatchOptions, label: &str, reader: &ArrayReader, what: &str) -> Result<Option<PatchedVar>> {
    let g = &reader.geom;
    let names = reader.zarr.dimension_names().unwrap_or_default();
    let physical: Vec<Option<usize>> = options
        .size
        .iter()
        .map(|(axis, _)| match axis {
            PatchAxis::Axis(a) => (*a < g.shape.len()).then_some(*a),
            PatchAxis::Name(n) => names.iter().position(|d| d.as_deref() == Some(n.as_str())),
        })
        .collect();
    if physical.iter().all(Option::is_none) {
        return Ok(None);
    }
    let refuse = |why: String| Err(Error::Config(format!("cannot {what} {label:?}: {why}")));
    let Some(physical) = physical.into_iter().collect::<Option<Vec<usize>>>() else {
        return refuse(format!("it has some of the patched axes only ({:?} of {names:?})", options.size));
    };
    if let Some(a) = physical.iter().find(|&&a| a == g.sample_axis) {
        return refuse(format!("axis {a} is its sample axis; name an inner axis"));
    }
    let inner: Vec<usize> = g.inner_shape().iter().map(|&d| d as usize).collect();
    if reader.out_inner != inner {
        return refuse(format!(
            "a chunk transform changes its sample shape from {inner:?} to {:?}; scope the transform to other \
             arrays",
            reader.out_inner
        ));
    }
    let inner_axes: Vec<usize> = g.inner_axes().collect();
    let dims = physical.iter().map(|a| inner_axes.iter().position(|x| x == a).unwrap_or(0)).collect();
    let labels =
        physical.iter().map(|&a| names.get(a).cloned().flatten().unwrap_or_else(|| format!("axis{a}"))).collect();
    Ok(Some(PatchedVar {
        dims: PatchedDims(dims),
        names: labels,
        extent: physical.iter().map(|&a| g.shape[a]).collect(),
    }))
}

/// One variable's patched axes: where they lie among its inner dimensions, their names and
/// lengths.
pub(super) struct PatchedVar {
    pub(super) dims: PatchedDims,
    pub(super) names: Vec<String>,
    pub(super) extent: Vec<u64>,
}

impl Assembly {
    /// Under a rank mesh, this rank's part of each row of the variables with the split axis
    /// (`mesh.rs`); the others are read whole.
    ///
    /// # Errors
    /// [`Error::Config`] when no variable has the axis, it is a sample axis, or a row is
    /// shorter on it than the group has ranks (a rank would get nothing).
    pub(super) fn parts(
        &self,
        readers: &[ArrayReader],
        gather_vars: &mut [GatherVar],
        patcher: Option<&Patcher>,
    ) -> Result<()> {
        let Some(mp) = &self.options.model_parallel else { return Ok(()) };
        let (_, p) = mp.place(self.options.knobs.rank);
        let axis = PatchOptions::grid(vec![(mp.axis.clone(), 1)]);
        let mut found = false;
        for gv in gather_vars.iter_mut() {
            let Some(PatchedVar { dims, names, extent }) =
                patched_axes(&axis, &gv.label, &readers[gv.path as usize], "split for model_parallel the rows of")
                    .map_err(|e| e.for_option("model_parallel_axis"))?
            else {
                continue;
            };
            let dim = dims.0[0];
            if gv.picks.iter().any(|p| p.dim == dim) {
                return Err(Error::option(
                    "model_parallel_axis",
                    format!(
                        "`model_parallel` splits rows along {}, on which `sel` lists labels; split another axis",
                        names[0]
                    ),
                ));
            }
            // The row's box on that axis: the patch, where the axis is patched, else the field.
            let patched = gv
                .patch
                .as_ref()
                .zip(patcher)
                .and_then(|(d, pt)| d.0.iter().position(|&x| x == dim).map(|i| pt.size[i]));
            let region = gv.region.iter().find(|r| r.dim == dim).map(|r| r.len);
            let len = patched.or(region).unwrap_or(extent[0]);
            if len < mp.size as u64 {
                return Err(Error::option(
                    "model_parallel",
                    format!(
                        "{:?} has {len} elements on {} for `model_parallel`={}: every rank of a group needs a part; \
                         split another axis or use a smaller group",
                        gv.label, names[0], mp.size
                    ),
                ));
            }
            let (start, part_len) = crate::mesh::part(p, mp.size, len);
            gv.part = Some(VarPart { dim, name: names[0].clone(), start, len: part_len });
            found = true;
        }
        if !found {
            return Err(Error::option(
                "model_parallel_axis",
                format!(
                    "`model_parallel` splits rows along {} but no variable has it; name a dimension from the arrays' \
                     dimension_names or a physical axis index (`model_parallel_axis`)",
                    mp.axis
                ),
            ));
        }
        Ok(())
    }

    /// The patch arithmetic, with each patched variable's patch dimensions set in `gather_vars`
    /// (`None` without patches). A variable with every patched axis is patched, one with none
    /// is read whole; one with some, or patched axes of another length, is refused.
    pub(super) fn patcher(
        &self,
        readers: &[ArrayReader],
        gather_vars: &mut [GatherVar],
    ) -> Result<Option<Arc<Patcher>>> {
        let Some(options) = &self.options.patch else { return Ok(None) };
        if options.size.is_empty() {
            return Err(Error::option(
                "patch",
                "`patch` names no axis; give a size per patched axis, e.g. {\"lat\": 128}",
            ));
        }
        let mut field: Option<(String, Vec<String>, Vec<u64>)> = None;
        for gv in gather_vars.iter_mut() {
            let reader = &readers[gv.path as usize];
            let Some(PatchedVar { dims, names, extent }) =
                patched_axes(options, &gv.label, reader, "cut patches from").map_err(|e| e.for_option("patch"))?
            else {
                continue;
            };
            match &field {
                Some((first, _, e)) if *e != extent => {
                    return Err(Error::option(
                        "patch",
                        format!(
                            "patched axes have length {e:?} in {first:?} but {extent:?} in {:?}; patch variables of \
                             one grid, or name the arrays to read",
                            gv.label
                        ),
                    ));
                }
                Some(_) => {}
                None => field = Some((gv.label.clone(), names, extent)),
            }
            gv.patch = Some(dims);
        }
        let Some((_, names, extent)) = field else {
            let axes: Vec<String> = options.size.iter().map(|(a, _)| a.to_string()).collect();
            return Err(Error::option(
                "patch",
                format!(
                    "`patch` names {} but no variable has {}; name dimensions from the arrays' dimension_names or \
                     _ARRAY_DIMENSIONS, or physical axis indices",
                    axes.join(", "),
                    if axes.len() == 1 { "it" } else { "them all" }
                ),
            ));
        };
        if let Some(r) = self.regions.iter().find(|r| r.picks.is_some() && names.contains(&r.dim)) {
            return Err(Error::option(
                "sel",
                format!(
                    "`patch` cuts {:?} into runs of positions, and `sel` lists labels on it that are not one run; \
                     select a range on a patched axis",
                    r.dim
                ),
            ));
        }
        let region =
            |d: &String, e: u64| self.regions.iter().find(|r| r.dim == *d).map_or((0, e), |r| (r.start, r.len));
        let (offset, span): (Vec<u64>, Vec<u64>) = names.iter().zip(&extent).map(|(d, &e)| region(d, e)).unzip();
        let mut patcher = Patcher::new(options, names, span)?;
        patcher.offset = offset;
        patcher.coordinates = (patcher.dims.iter().zip(&extent))
            .map(|(d, &e)| self.patch_coordinates.iter().find(|c| c.name == *d && c.len() as u64 == e).cloned())
            .collect();
        Ok(Some(Arc::new(patcher)))
    }

    /// Cut each variable's rows to the regions `sel` picked on its inner axes that are not
    /// patched (on a patched axis the patcher keeps the patches inside the region).
    ///
    /// # Errors
    /// [`Error::Config`] for a variable whose axis has another length than the coordinate the
    /// region was read from, or one whose chunk transform changes its sample shape.
    pub(super) fn cut_to_regions(&self, readers: &[ArrayReader], gather_vars: &mut [GatherVar]) -> Result<()> {
        for r in &self.regions {
            let axis = PatchOptions::grid(vec![(PatchAxis::Name(r.dim.clone()), 1)]);
            for gv in gather_vars.iter_mut() {
                let reader = &readers[gv.path as usize];
                let Some(PatchedVar { dims, names, extent }) =
                    patched_axes(&axis, &gv.label, reader, "select on").map_err(|e| e.for_option("sel"))?
                else {
                    continue;
                };
                if extent[0] != r.extent {
                    return Err(Error::option(
                        "sel",
                        format!(
                            "`sel` on {:?}: {:?} has {} positions on it but its coordinate {}; select on variables of \
                             one grid, or name the arrays to read",
                            r.dim, gv.label, extent[0], r.extent
                        ),
                    ));
                }
                let dim = dims.0[0];
                if gv.patch.as_ref().is_some_and(|p| p.0.contains(&dim)) {
                    continue;
                }
                match &r.picks {
                    Some(positions) => gv.picks.push(AxisPicks::new(dim, Arc::clone(positions))),
                    None => gv.region.push(VarPart { dim, name: names[0].clone(), start: r.start, len: r.len }),
                }
            }
        }
        Ok(())
    }
}
