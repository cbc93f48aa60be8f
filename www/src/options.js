// The configuration the side panel's controls describe, in `open()`'s option names, and the
// what-if questions asked of it (epoch, concurrent iterations, decode threads, target shift).
// The report, the probe, the preview and the live run all read the controls through here.
import { $, MiB } from './app.js';

/** The number in control `id`; `undefined` when it is empty (the engine's default). */
export function num(id) {
  const v = $(id).value.trim();
  return v === '' ? undefined : Number(v);
}

/**
 * A text field's `lat=45,lon=90` (the CLI's `--patch` spelling), as typed: the engine reads
 * it (core's one reader of that grammar, in the order typed: the order of `patchOrigins`'
 * columns) and refuses what is not AXIS=SIZE, naming the option. Empty text is `undefined`.
 */
export function axisSizesText(text) {
  const t = text.trim();
  return t === '' ? undefined : t;
}

/**
 * The patch options of the controls (`patch`, `patchMode`, and the stride of a grid or the
 * patches per sample of a random draw); none without a patch size, as the engine asks.
 */
function patchOptions() {
  const patch = axisSizesText($('patch').value);
  const random = $('patchMode').value === 'random';
  // Each mode's own knob only: the other is disabled, and the engine refuses it.
  $('patchStride').disabled = random;
  $('patchesPerSample').disabled = !random;
  if (!patch) return {};
  return random
    ? { patch, patchMode: 'random', patchesPerSample: num('patchesPerSample') }
    : { patch, patchMode: 'grid', patchStride: axisSizesText($('patchStride').value) };
}

/** The configuration the controls describe, in `open()`'s option names (an Error for unparsable patch text). */
export function currentOptions() {
  const variables = [...document.querySelectorAll('input[name=var]:checked')].map((i) => i.value);
  const budget = num('budgetMiB');
  return {
    ...patchOptions(),
    variables,
    batchSize: num('batchSize'),
    blockChunks: num('blockChunks'),
    firstBlockChunks: num('firstBlockChunks'),
    maxInflight: num('maxInflight'),
    prefetchDepth: num('prefetchDepth'),
    fractions: [num('fracTrain') ?? 0, num('fracVal') ?? 0, num('fracTest') ?? 0],
    seed: num('seed'),
    shuffle: $('shuffle').checked,
    cacheBudgetBytes: budget === undefined ? undefined : Math.round(budget * MiB),
  };
}

/** The what-if questions: which epoch, how many concurrent iterations and decode threads, which target shift. */
export function whatIf() {
  return { epoch: num('epoch') ?? 0, iterations: num('iterations') ?? 1, threads: num('threads') ?? 1, shift: num('shift') ?? 0 };
}
