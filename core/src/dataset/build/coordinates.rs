//! Reading the coordinates a builder needs before it builds: the sample axis's (for
//! `coords` and `sel`), the patched axes', and the regions `sel` picks on inner axes.

use std::sync::Arc;

use super::DatasetBuilder;
use crate::coords::{Coordinate, LabelSel, group_of, read_agreed_coordinate};
use crate::dataset::Variable;
use crate::error::{Error, Result};
use crate::patch::PatchAxis;
use crate::retry::PolicyStorage;
use crate::runtime::Storage;
use crate::split::SplitOptions;

/// A region `sel` picked on an inner dimension of `extent` positions: `start .. start + len`,
/// or, for labels that are not one ascending run, the positions `picks` in their order.
/// Every row is cut to it; on a patched axis the patches lie inside it (a run only).
#[derive(Debug, Clone)]
pub(crate) struct Region {
    pub dim: String,
    pub start: u64,
    pub len: u64,
    pub extent: u64,
    pub picks: Option<Arc<[u64]>>,
}

impl Region {
    fn new(dim: String, positions: Vec<u64>, extent: u64) -> Self {
        let start = positions.first().copied().unwrap_or(0);
        let run = positions.iter().enumerate().all(|(i, &p)| p == start + i as u64);
        let len = positions.len() as u64;
        Self { dim, start, len, extent, picks: (!run).then(|| positions.into()) }
    }
}

impl DatasetBuilder {
    /// With `coords` or `sel` in the options: read the sample axis's coordinate (`coords.rs`)
    /// and apply `sel` as the split's sample range. With variables in several groups (or
    /// joined stores, `join.rs`), check that the coordinates they have agree. Nothing to do
    /// otherwise.
    ///
    /// # Errors
    /// [`Error::Config`] for a `sel` on another dimension, on a store without the coordinate,
    /// or next to an explicit manifest, and for groups whose coordinates disagree; what
    /// reading the coordinate reports.
    pub async fn read_coordinate(mut self) -> Result<Self> {
        let variables = self.resolve_variables()?;
        let storage = PolicyStorage::new(
            Arc::clone(&self.storage),
            Arc::clone(&self.runtime.executor),
            self.options.read_policy.clone(),
        );
        let on_samples = self.read_regions(&storage, &variables).await?;
        let paths: Vec<&str> = variables.iter().map(|v| v.geometry.path.as_str()).collect();
        let several_groups = paths.iter().any(|p| group_of(p) != group_of(paths[0]));
        let wanted = self.options.knobs.coords || on_samples.is_some();
        let one_length = variables.iter().all(|v| v.geometry.n_samples() == variables[0].geometry.n_samples());
        // Unequal lengths are refused by `build`, naming every variable and store.
        if !one_length || (!wanted && !several_groups) {
            return Ok(self);
        }
        let g = &variables[0].geometry;
        let dim = self.find_opened(&g.path)?.dimension_names().and_then(|d| d.get(g.sample_axis).cloned().flatten());
        let coordinate = match &dim {
            Some(d) => read_agreed_coordinate(&storage, &paths, d, g.n_samples(), wanted).await?,
            None => None,
        };
        if let Some(sel) = on_samples {
            let Some(c) = coordinate.as_ref().filter(|c| c.name == sel.dim) else {
                return Err(Error::option(
                    "sel",
                    format!(
                        "`sel` on {:?} needs the sample axis's coordinate of that name; the sample axis is {} and the \
                         store has {}",
                        sel.dim,
                        dim.as_deref().map_or("unnamed".to_string(), |d| format!("{d:?}")),
                        coordinate
                            .as_ref()
                            .map_or("no coordinate array for it".to_string(), |c| format!("{:?}", c.name))
                    ),
                ));
            };
            if self.manifest.is_some() {
                return Err(Error::option(
                    "sel",
                    "`sel` on the sample axis with a manifest: the manifest already fixes the samples; pass one",
                ));
            }
            let picked = sel.positions(c).map_err(|e| e.for_option("sel"))?;
            let (start, stop) = (picked.iter().min().copied().unwrap_or(0), picked.iter().max().map_or(0, |m| m + 1));
            let split =
                self.split.take().unwrap_or(SplitOptions { seed: self.options.knobs.seed, ..SplitOptions::default() });
            let range = match split.sample_range {
                Some((a, b)) => (a.max(start), b.min(stop)),
                None => (start, stop),
            };
            self.split = Some(SplitOptions { sample_range: Some(range), ..split });
            // The range snaps outward to whole chunks; the mask keeps exactly the selection (a
            // user's mask of the wrong length is left for `Draws` to refuse).
            let n = g.n_samples();
            let mut keep = vec![false; n as usize];
            for &t in &picked {
                keep[t as usize] = true;
            }
            let mask = self.options.sample_mask.take();
            self.options.sample_mask = Some(match mask {
                Some(m) if m.len() as u64 != n => m,
                m => keep.iter().enumerate().map(|(t, &k)| k && m.as_ref().is_none_or(|m| m[t])).collect(),
            });
        }
        self.coordinate = coordinate.filter(|_| wanted).map(Arc::new);
        self.patch_coordinates = self.read_patch_coordinates(&storage, &variables).await;
        Ok(self)
    }

    /// The regions `sel` picks on inner axes (a dimension some variable has off its sample
    /// axis), each read from that dimension's coordinate into [`Self::regions`]; returns the
    /// selection left for the sample axis, if any.
    ///
    /// # Errors
    /// [`Error::Config`] for two selections left for the sample axis, an inner dimension
    /// without a coordinate array, or bounds that select nothing; what reading reports.
    async fn read_regions(&mut self, storage: &dyn Storage, variables: &[Variable]) -> Result<Option<LabelSel>> {
        let mut on_samples = Vec::new();
        for sel in self.options.sel.clone() {
            let found = variables.iter().find_map(|v| {
                let names = self.find_opened(&v.geometry.path).ok()?.dimension_names()?;
                let a = names.iter().position(|n| n.as_deref() == Some(sel.dim.as_str()))?;
                (a != v.geometry.sample_axis).then(|| (v, v.geometry.shape[a]))
            });
            let Some((v, extent)) = found else {
                on_samples.push(sel);
                continue;
            };
            let Some(c) = crate::coords::read_coordinate(storage, &v.geometry.path, &sel.dim, extent).await? else {
                return Err(Error::option(
                    "sel",
                    format!(
                        "`sel` on {:?} needs its coordinate: a 1-d array {:?} of {extent} values beside {:?}; select \
                         by index with a patch, or add the coordinate to the store",
                        sel.dim, sel.dim, v.geometry.path
                    ),
                ));
            };
            let positions = sel.positions(&c).map_err(|e| e.for_option("sel"))?;
            self.regions.push(Region::new(sel.dim, positions, extent));
        }
        if on_samples.len() > 1 {
            let dims: Vec<&str> = on_samples.iter().map(|s| s.dim.as_str()).collect();
            return Err(Error::option(
                "sel",
                format!(
                    "`sel` names {dims:?}, which are not inner dimensions of the variables, and only one can be the \
                     sample axis; name the sample axis's coordinate and inner dimensions"
                ),
            ));
        }
        Ok(on_samples.pop())
    }

    /// With `coords` and patches: each patched axis's coordinate (a 1-d array named after
    /// its dimension beside the first variable that has the axis), for the values of each
    /// patch. One the store lacks, or cannot be read as numbers, is left out: patches work
    /// without it, as before coordinates were asked for.
    async fn read_patch_coordinates(&self, storage: &dyn Storage, variables: &[Variable]) -> Vec<Arc<Coordinate>> {
        let Some(patch) =
            self.options.patch.as_ref().filter(|_| self.options.knobs.coords || !self.options.sel.is_empty())
        else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for (axis, _) in &patch.size {
            let found = variables.iter().find_map(|v| {
                let names = self.find_opened(&v.geometry.path).ok()?.dimension_names()?;
                let a = match axis {
                    PatchAxis::Name(n) => names.iter().position(|x| x.as_deref() == Some(n.as_str()))?,
                    PatchAxis::Axis(a) => *a,
                };
                Some((v, names.get(a)?.clone()?, *v.geometry.shape.get(a)?))
            });
            let Some((v, name, extent)) = found else { continue };
            if let Ok(Some(c)) = crate::coords::read_coordinate(storage, &v.geometry.path, &name, extent).await {
                out.push(Arc::new(c));
            }
        }
        out
    }
}
