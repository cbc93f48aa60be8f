// Must NOT type-check: proves the type check can fail. tsc (tsconfig.json) must report exactly
// one error in the project, TS2322 on the line marked below (a knob of the wrong type).
import type { OpenOptions } from 'insitubatch';

export const options: OpenOptions = {
  batchSize: '32', // expected error: batchSize is a number
};
