// Check values the engine hands to JavaScript against the types js/index.d.ts declares for
// them, with the TypeScript compiler API (npm `typescript`, loaded by the caller).
//
// The report types are generated from the Rust report types (tools/boundary-types writes
// src/reports.d.ts, which index.d.ts re-exports), so they cannot drift key for key; this
// compares real values with the declarations all the same, which checks what the generator
// cannot: that schemars reads serde as serde writes (a `skip_serializing_if`, a custom
// `Serialize`), the narrowings the Rust types state by hand for the schema (`dtype` as a
// `DTypeName`, `zarr_format` as 2 | 3, ...), and the hand-written rest of index.d.ts (the
// options, `BadChunk`, `ByteRange`). Hand-written because no library compares a runtime value
// with a .d.ts.

/**
 * Parse `file` and the package's files it imports, and collect their top-level interfaces and
 * type aliases by name. `diagnostics` holds TypeScript's syntax and semantic errors in them, as
 * text; `files` their paths.
 */
export function loadDeclarations(ts, file) {
  const program = ts.createProgram([file], { noEmit: true, strict: true, skipLibCheck: false, types: [] });
  // `file` and the package's files it imports (src/reports.d.ts), not TypeScript's own.
  const own = program
    .getSourceFiles()
    .filter((f) => !program.isSourceFileDefaultLibrary(f) && !f.fileName.includes('/node_modules/'));
  const diagnostics = own
    .flatMap((source) => [...program.getSyntacticDiagnostics(source), ...program.getSemanticDiagnostics(source)])
    .map((d) => ts.flattenDiagnosticMessageText(d.messageText, '\n'));
  const decls = new Map();
  own.forEach((source) => collect(ts, source, decls));
  return { ts, diagnostics, decls, files: own.map((f) => f.fileName) };
}

/** The same, from source text (the checker's own tests). */
export function declarationsFromText(ts, text) {
  const source = ts.createSourceFile('inline.d.ts', text, ts.ScriptTarget.ES2022, true);
  return { ts, diagnostics: [], decls: collect(ts, source, new Map()) };
}

function collect(ts, source, decls) {
  for (const s of source.statements) {
    if (ts.isInterfaceDeclaration(s) || ts.isTypeAliasDeclaration(s)) decls.set(s.name.text, s);
  }
  return decls;
}

/**
 * Check `value` against the declared type `typeName`. Returns `{ errors, visited }`:
 * `errors` are messages naming the path (`PassStats.depths.queue_now`), `visited` the
 * interfaces a value was checked against. `allowUnknown` lists `Interface.field` paths
 * whose declared `unknown`/`any` is deliberate (arbitrary user JSON); anywhere else such a
 * type hides drift, so it is an error.
 */
export function checkValue(d, typeName, value, { allowUnknown = [] } = {}) {
  const cx = { d, errors: [], visited: new Set(), allowUnknown: new Set(allowUnknown) };
  checkNamed(cx, typeName, value, typeName, typeName);
  return { errors: [...new Set(cx.errors)], visited: cx.visited };
}

function checkNamed(cx, name, value, path, owner) {
  const decl = cx.d.decls.get(name);
  if (!decl) return cx.errors.push(`${path}: type ${name} is not declared in index.d.ts`);
  if (cx.d.ts.isTypeAliasDeclaration(decl)) return checkType(cx, decl.type, value, path, owner);
  checkMembers(cx, name, membersOf(cx, decl), value, path);
}

/** The property names an interface declares (its bases' included), e.g. to compare an input type with the engine's field list. */
export function declaredKeys(d, name) {
  const decl = d.decls.get(name);
  if (!decl || !d.ts.isInterfaceDeclaration(decl)) throw new Error(`${name} is not an interface in index.d.ts`);
  return membersOf({ d }, decl).map((m) => m.name.getText().replace(/^['"]|['"]$/g, ''));
}

/** Property signatures of an interface, its `extends` bases' included. */
function membersOf(cx, decl) {
  const { ts } = cx.d;
  const out = [];
  for (const clause of decl.heritageClauses ?? []) {
    for (const t of clause.types) {
      const base = cx.d.decls.get(t.expression.getText());
      if (base && ts.isInterfaceDeclaration(base)) out.push(...membersOf(cx, base));
    }
  }
  return out.concat(decl.members.filter((m) => ts.isPropertySignature(m)));
}

function checkMembers(cx, owner, members, value, path) {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    return cx.errors.push(`${path}: want an object (${owner}), got ${show(value)}`);
  }
  cx.visited.add(owner);
  const declared = new Set();
  for (const m of members) {
    const key = m.name.getText().replace(/^['"]|['"]$/g, '');
    declared.add(key);
    const optional = Boolean(m.questionToken);
    if (!(key in value)) {
      if (!optional) cx.errors.push(`${path}.${key}: declared in index.d.ts (${owner}) but the engine did not send it`);
      continue;
    }
    if (optional && value[key] === undefined) continue;
    if (!m.type) continue;
    checkType(cx, m.type, value[key], `${path}.${key}`, `${owner}.${key}`);
  }
  for (const key of Object.keys(value)) {
    if (!declared.has(key)) cx.errors.push(`${path}.${key}: sent by the engine but not declared in index.d.ts (${owner})`);
  }
}

function checkType(cx, t, value, path, owner) {
  const { ts } = cx.d;
  const K = ts.SyntaxKind;
  switch (t.kind) {
    case K.NumberKeyword:
      return expect(cx, typeof value === 'number', path, 'a number', value);
    case K.StringKeyword:
      return expect(cx, typeof value === 'string', path, 'a string', value);
    case K.BooleanKeyword:
      return expect(cx, typeof value === 'boolean', path, 'a boolean', value);
    case K.BigIntKeyword:
      return expect(cx, typeof value === 'bigint', path, 'a bigint', value);
    case K.UndefinedKeyword:
      return expect(cx, value === undefined, path, 'undefined', value);
    case K.NullKeyword:
      return expect(cx, value === null, path, 'null', value);
    case K.UnknownKeyword:
    case K.AnyKeyword:
      if (!cx.allowUnknown.has(owner)) {
        cx.errors.push(`${owner}: declared ${t.getText()}; declare its real type so drift is caught`);
      }
      return;
    case K.LiteralType:
      return checkLiteral(cx, t.literal, value, path);
    case K.ParenthesizedType:
      return checkType(cx, t.type, value, path, owner);
    case K.ArrayType:
      if (!expect(cx, Array.isArray(value), path, `an array (${t.getText()})`, value)) return;
      return value.forEach((v, i) => checkType(cx, t.elementType, v, `${path}[${i}]`, owner));
    case K.TupleType:
      return checkTuple(cx, t, value, path, owner);
    case K.UnionType:
      return checkUnion(cx, t, value, path, owner);
    case K.TypeLiteral:
      return checkMembers(cx, owner, t.members.filter((m) => ts.isPropertySignature(m)), value, path);
    case K.TypeReference:
      return checkReference(cx, t, value, path, owner);
    case K.FunctionType:
      // A callback (OpenOptions.credentials): what it returns is checked where it is called.
      return expect(cx, typeof value === 'function', path, 'a function', value);
    default:
      cx.errors.push(`${path}: the checker does not know the type ${t.getText()}; extend js/test-support/dts-check.js`);
  }
}

function checkLiteral(cx, lit, value, path) {
  const K = cx.d.ts.SyntaxKind;
  const want =
    lit.kind === K.NullKeyword ? null
    : lit.kind === K.TrueKeyword ? true
    : lit.kind === K.FalseKeyword ? false
    : lit.kind === K.NumericLiteral ? Number(lit.text)
    : lit.text;
  expect(cx, value === want, path, JSON.stringify(want), value);
}

function checkTuple(cx, t, value, path, owner) {
  const elems = t.elements.map((e) => (cx.d.ts.isNamedTupleMember(e) ? e.type : e));
  if (!expect(cx, Array.isArray(value) && value.length === elems.length, path, `a tuple ${t.getText()}`, value)) return;
  elems.forEach((e, i) => checkType(cx, e, value[i], `${path}[${i}]`, owner));
}

/** A value fits a union when it fits one member; report every member's complaint if none. */
function checkUnion(cx, t, value, path, owner) {
  const tries = [];
  for (const member of t.types) {
    const sub = { ...cx, errors: [], visited: new Set() };
    checkType(sub, member, value, path, owner);
    if (sub.errors.length === 0) {
      sub.visited.forEach((v) => cx.visited.add(v));
      return;
    }
    tries.push(sub.errors.join('; '));
  }
  cx.errors.push(`${path}: fits no member of ${t.getText()}: ${tries.join(' | ')}`);
}

function checkReference(cx, t, value, path, owner) {
  const name = t.typeName.getText();
  const args = t.typeArguments ?? [];
  if (name === 'Record' && args.length === 2) {
    if (!expect(cx, typeof value === 'object' && value !== null && !Array.isArray(value), path, 'an object', value)) {
      return;
    }
    return Object.entries(value).forEach(([k, v]) => checkType(cx, args[1], v, `${path}[${JSON.stringify(k)}]`, owner));
  }
  if (name === 'Array' && args.length === 1) {
    if (!expect(cx, Array.isArray(value), path, `an array (${t.getText()})`, value)) return;
    return value.forEach((v, i) => checkType(cx, args[0], v, `${path}[${i}]`, owner));
  }
  if (cx.d.decls.has(name)) return checkNamed(cx, name, value, path, owner);
  // A built-in class (Float32Array, BigUint64Array, ...).
  const ctor = globalThis[name];
  if (typeof ctor === 'function') return expect(cx, value instanceof ctor, path, `a ${name}`, value);
  cx.errors.push(`${path}: type ${name} is neither declared in index.d.ts nor a global class`);
}

function expect(cx, ok, path, want, value) {
  if (!ok) cx.errors.push(`${path}: want ${want}, got ${show(value)}`);
  return ok;
}

function show(v) {
  if (v === undefined) return 'undefined';
  if (typeof v === 'bigint') return `${v}n`;
  const s = JSON.stringify(v);
  return s.length > 80 ? `${s.slice(0, 77)}...` : s;
}

/**
 * Interfaces reachable from `roots` through property types: each must have been checked
 * against at least one value, or its fields were never compared (an empty array, a null).
 */
export function reachableInterfaces(d, roots) {
  const { ts } = d;
  const seen = new Set();
  const visitType = (t) => {
    if (!t) return;
    if (ts.isTypeReferenceNode(t)) {
      const name = t.typeName.getText();
      (t.typeArguments ?? []).forEach(visitType);
      if (d.decls.has(name)) visitName(name);
      return;
    }
    ts.forEachChild(t, (c) => (ts.isTypeNode(c) ? visitType(c) : undefined));
  };
  const visitName = (name) => {
    if (seen.has(name)) return;
    const decl = d.decls.get(name);
    if (!decl) return;
    if (ts.isTypeAliasDeclaration(decl)) return visitType(decl.type);
    seen.add(name);
    decl.members.filter((m) => ts.isPropertySignature(m)).forEach((m) => visitType(m.type));
    for (const clause of decl.heritageClauses ?? []) clause.types.forEach((b) => visitName(b.expression.getText()));
  };
  roots.forEach(visitName);
  return seen;
}

/** Read index.d.ts next to this package's src/. */
export function indexDtsPath() {
  return new URL('../index.d.ts', import.meta.url).pathname;
}

