// The webpack 5 build of the same page as Vite's (index.html, main.js): webpack's defaults
// and nothing about the package (its worker, wasm and glue are found through `new Worker(new
// URL(...))` and `new URL(..., import.meta.url)`). Output in dist-webpack/, with index.html
// loading the bundle as the classic script webpack writes.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const html = readFileSync(new URL('./index.html', import.meta.url), 'utf8')
  .replace('<script type="module" src="./main.js"></script>', '<script src="./main.js"></script>')
  .replace('bundled by Vite', 'bundled by webpack');

/** Emits index.html beside the bundle (what html-webpack-plugin would, without the dependency). */
const emitHtml = {
  apply(compiler) {
    compiler.hooks.thisCompilation.tap('emit-html', (compilation) => {
      compilation.hooks.processAssets.tap({ name: 'emit-html', stage: compiler.webpack.Compilation.PROCESS_ASSETS_STAGE_ADDITIONAL }, () => {
        compilation.emitAsset('index.html', new compiler.webpack.sources.RawSource(html));
      });
    });
  },
};

export default {
  mode: 'production',
  entry: './main.js',
  output: { path: fileURLToPath(new URL('./dist-webpack', import.meta.url)), clean: true },
  performance: { hints: false },
  plugins: [emitHtml],
};
