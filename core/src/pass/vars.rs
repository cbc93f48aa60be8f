//! A labelled variable as the gather sees it: its rows' shape in the batch and the boxes a
//! row copies (patch, `sel` regions, this rank's part).

use crate::patch::{AxisPicks, Patcher};

/// A labelled variable as the gather sees it.
#[derive(Debug, Clone)]
pub(crate) struct GatherVar {
    pub label: String,
    pub path: u32,
    pub offset: i64,
    pub spc: u64,
    pub dtype: crate::array::DType,
    pub inner: Vec<usize>,
    pub sample_bytes: usize,
    /// Where this variable's patch lies (`None`: the whole sample, with or without patches).
    pub patch: Option<crate::patch::PatchedDims>,
    /// The regions `sel` cut its rows to on inner axes it is not patched on.
    pub region: Vec<VarPart>,
    /// The positions `sel` lists pick on inner axes, in the labels' order.
    pub picks: Vec<AxisPicks>,
    /// This rank's part of each row under a rank mesh (`mesh.rs`; `None`: whole rows).
    pub part: Option<VarPart>,
}

/// A part of one variable's rows: `start .. start + len` on inner dimension `dim`. A
/// model-parallel rank's part (relative to the row's box on `dim`), or a `sel` region.
#[derive(Debug, Clone)]
pub(crate) struct VarPart {
    pub dim: usize,
    pub name: String,
    pub start: u64,
    pub len: u64,
}

impl GatherVar {
    /// A row's shape in the batch: the sample's inner shape, cut to the patch on patched axes.
    pub(super) fn out_inner(&self, patcher: Option<&Patcher>) -> Vec<usize> {
        let mut inner = self.inner.clone();
        if let (Some(dims), Some(p)) = (&self.patch, patcher) {
            for (&d, &s) in dims.0.iter().zip(&p.size) {
                inner[d] = s as usize;
            }
        }
        for r in &self.region {
            inner[r.dim] = r.len as usize;
        }
        for p in &self.picks {
            inner[p.dim] = p.positions.len();
        }
        if let Some(part) = &self.part {
            inner[part.dim] = part.len as usize;
        }
        inner
    }

    /// The box row `i` of this variable copies, as `(dims, origin, size)` on its inner
    /// dimensions: the patch and the `sel` regions, cut to this rank's part; empty for a
    /// whole sample.
    pub(super) fn row_box(&self, patch: Option<(&[u64], &Patcher)>) -> (Vec<usize>, Vec<u64>, Vec<u64>) {
        let (mut dims, mut origin, mut size) = match (&self.patch, patch) {
            (Some(d), Some((o, p))) => (d.0.clone(), o.to_vec(), p.size.clone()),
            _ => (Vec::new(), Vec::new(), Vec::new()),
        };
        for r in &self.region {
            dims.push(r.dim);
            origin.push(r.start);
            size.push(r.len);
        }
        if let Some(part) = &self.part {
            match dims.iter().position(|&d| d == part.dim) {
                Some(i) => {
                    origin[i] += part.start;
                    size[i] = part.len;
                }
                None => {
                    dims.push(part.dim);
                    origin.push(part.start);
                    size.push(part.len);
                }
            }
        }
        (dims, origin, size)
    }

    /// The boxes a row reads: [`Self::row_box`], cut into one box per run of consecutive
    /// positions a `sel` list picks (what `plan_tiles` marks tiles for).
    pub(super) fn row_boxes(&self, patch: Option<(&[u64], &Patcher)>) -> Vec<(Vec<usize>, Vec<u64>, Vec<u64>)> {
        let mut boxes = vec![self.row_box(patch)];
        for p in &self.picks {
            let runs = &p.runs;
            boxes = (boxes.iter())
                .flat_map(|(d, o, s)| {
                    runs.iter().map(move |&(start, n)| {
                        let (mut d, mut o, mut s) = (d.clone(), o.clone(), s.clone());
                        d.push(p.dim);
                        o.push(start);
                        s.push(n);
                        (d, o, s)
                    })
                })
                .collect();
        }
        boxes
    }
}
