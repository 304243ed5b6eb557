/**
 * The package's public names. The root (`vram`) is kept small on purpose: ROOT below lists its names,
 * so a new root export is a visible decision; every name the old root exported (OLD_ROOT, 360 names
 * before the subpaths) is still exported by the root or a subpath; and every type a consumer meets in
 * a public signature can be imported from some entry point. A consumer who writes
 * `const o: TrackingOptions = {...}` or a function taking a `CopyEndpoint` needs the name; a type
 * reachable only as `Parameters<typeof f>[1]` is a gap in the API. The last is found mechanically:
 * the walk starts at the declarations every entry point exports (the built output, after
 * `stripInternal`, so `@internal` members are not public), collects every type reference in their
 * public and protected members (protected: the API of a subclass, e.g. a custom `MemoryResource`),
 * follows each reference that resolves to a declaration in vram's own sources (transitively, through
 * the unexported ones too), and fails naming every one that no entry point exports. The API reference
 * (typedoc.json) lists the same entry points, each titled by its `@module` tag as it is imported.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import ts from 'typescript';
import { entryPoints, entryProgram, resolveAlias } from './entry-points.js';

const distSrc = path.resolve(fileURLToPath(new URL('../../src/', import.meta.url)));
const entries = entryPoints();

/** One type that a public signature uses and no entry point exports, with where it was met. */
interface Missing {
  readonly name: string;
  readonly file: string;
  readonly usedBy: string;
}

/**
 * The unexported vram types that the declarations exported from `entryFiles` use.
 * @param entryFiles The entry declaration files (dist/src/index.d.ts and the subpaths').
 * @param ownDir The folder of the package's own declarations; types declared elsewhere (lib, node) are not checked.
 * @returns One record per missing type, in the order found.
 */
function unexportedTypes(entryFiles: readonly string[], ownDir: string): Missing[] {
  const { checker, modules } = entryProgram(entryFiles);
  const resolve = (symbol: ts.Symbol): ts.Symbol => resolveAlias(checker, symbol);
  const isOwn = (symbol: ts.Symbol): boolean => (symbol.declarations ?? []).some((d) => path.resolve(d.getSourceFile().fileName).startsWith(ownDir + path.sep));

  const exportsList = modules.flatMap((m) => checker.getExportsOfModule(m)).map((s) => ({ name: s.name, symbol: resolve(s) }));
  const exported = new Set(exportsList.map((e) => e.symbol));
  const visited = new Set<ts.Symbol>();
  const missing: Missing[] = [];

  // A private member (or an ECMAScript #private one) is no part of anyone's API; protected is (subclasses).
  const isPrivate = (member: ts.ClassElement | ts.TypeElement): boolean =>
    (ts.canHaveModifiers(member) && (ts.getModifiers(member) ?? []).some((m) => m.kind === ts.SyntaxKind.PrivateKeyword)) ||
    (member.name !== undefined && ts.isPrivateIdentifier(member.name));

  // The symbol an entity name stands for, taken at its root: `CUresult.SUCCESS` needs `CUresult`.
  const rootSymbol = (name: ts.EntityName | ts.Expression): ts.Symbol | undefined => {
    let node: ts.Node = name;
    while (ts.isQualifiedName(node) || ts.isPropertyAccessExpression(node)) {
      node = ts.isQualifiedName(node) ? node.left : node.expression;
    }
    return checker.getSymbolAtLocation(node);
  };

  const reference = (symbol: ts.Symbol | undefined, usedBy: string): void => {
    if (symbol === undefined) return;
    const target = resolve(symbol);
    if ((target.flags & ts.SymbolFlags.TypeParameter) !== 0 || !isOwn(target)) return;
    if (!exported.has(target) && !visited.has(target)) {
      const file = path.relative(ownDir, target.declarations?.[0]?.getSourceFile().fileName ?? '');
      missing.push({ name: target.name, file, usedBy });
    }
    visitSymbol(target, target.name);
  };

  // Every type reference in a subtree of type syntax.
  const walkTypes = (node: ts.Node, usedBy: string): void => {
    if (ts.isTypeReferenceNode(node)) reference(rootSymbol(node.typeName), usedBy);
    else if (ts.isExpressionWithTypeArguments(node)) reference(rootSymbol(node.expression), usedBy);
    else if (ts.isTypeQueryNode(node)) reference(rootSymbol(node.exprName), usedBy);
    else if (ts.isImportTypeNode(node) && node.qualifier !== undefined) reference(rootSymbol(node.qualifier), usedBy);
    // A computed member name (`[Symbol.dispose]`) is a value, not a type of the signature.
    if (ts.isComputedPropertyName(node)) return;
    ts.forEachChild(node, (child) => walkTypes(child, usedBy));
  };

  const visitDeclaration = (decl: ts.Declaration, owner: string): void => {
    if (ts.isClassDeclaration(decl) || ts.isInterfaceDeclaration(decl) || ts.isClassExpression(decl)) {
      decl.typeParameters?.forEach((p) => walkTypes(p, owner));
      decl.heritageClauses?.forEach((h) => walkTypes(h, owner));
      for (const member of decl.members) {
        if (isPrivate(member)) continue;
        const name = member.name !== undefined && !ts.isComputedPropertyName(member.name) ? member.name.getText() : '';
        walkTypes(member, name ? `${owner}.${name}` : owner);
      }
    } else if (ts.isModuleDeclaration(decl)) {
      // A namespace merged with a class or function: its exported members are public too.
      if (decl.body !== undefined && ts.isModuleBlock(decl.body)) decl.body.statements.forEach((s) => walkTypes(s, owner));
    } else {
      // Functions, type aliases, variables, enums: everything in them is signature.
      walkTypes(decl, owner);
    }
  };

  function visitSymbol(symbol: ts.Symbol, owner: string): void {
    if (visited.has(symbol)) return;
    visited.add(symbol);
    for (const decl of symbol.declarations ?? []) visitDeclaration(decl, owner);
  }

  for (const { name, symbol } of exportsList) visitSymbol(symbol, name);
  return missing;
}

/**
 * Helper types that are local to their module (no `export` there, so index.ts cannot re-export them)
 * and that consumers meet only inside a named, exported type's computation (`ComponentsOf<N>`,
 * `ScalarValue<N>`). Each is a known gap until its module exports it; an entry that no longer
 * applies fails the test below, so the list only shrinks.
 */
const moduleLocal = new Map<string, string>([]);

test('every vram type in a public signature is exported from the root or a subpath', () => {
  const found = unexportedTypes(
    entries.map((e) => e.declarations),
    distSrc,
  );
  const missing = found.filter((m) => moduleLocal.get(m.name) !== m.file);
  const stale = [...moduleLocal].filter(([name, file]) => !found.some((m) => m.name === name && m.file === file));
  assert.deepEqual(stale, [], 'entries of moduleLocal that no public signature uses unexported any more: remove them');
  const report = missing.map((m) => `${m.name} (${m.file}), used by ${m.usedBy}`).join('\n  ');
  assert.equal(missing.length, 0, `types used in public signatures but exported by no entry point (src/index.ts, src/public/*.ts):\n  ${report}`);
});

test('the walk reports an unexported type however it is reached', () => {
  // Guards the test itself: a walk that resolved nothing would pass the test above vacuously. A small
  // package whose exports use unexported types through each kind of reference the walk follows.
  const dir = mkdtempSync(path.join(tmpdir(), 'vram-exports-'));
  try {
    writeFileSync(
      path.join(dir, 'a.d.ts'),
      [
        'export interface Opt { sink: Sink; }',
        'export interface Sink { write(line: Line): void; }',
        'export type Line = string;',
        'export declare class Base { protected hook(x: Hooked): void; private secret(x: Secret): void; }',
        'export interface Hooked { n: number; } export interface Secret { n: number; }',
        'export declare class Derived extends Base { configure(o: Opt): Generic<Param>; }',
        'export interface Generic<T> { value: T; } export interface Param { p: 1; }',
        'export declare const table: { readonly [k: string]: Entry }; export interface Entry { e: 1; }',
        'export declare function f<T extends Constraint>(t: T): typeof hidden; export interface Constraint { c: 1; }',
        'export declare const hidden: number;',
        'export interface Fine { x: Date; }',
      ].join('\n'),
    );
    writeFileSync(path.join(dir, 'index.d.ts'), "export { Derived, table, f, Generic } from './a.js';\nexport type { Fine } from './a.js';\n");
    writeFileSync(path.join(dir, 'package.json'), '{"type":"module"}');
    const names = unexportedTypes([path.join(dir, 'index.d.ts')], dir)
      .map((m) => m.name)
      .sort();
    assert.deepEqual(names, ['Base', 'Constraint', 'Entry', 'Hooked', 'Line', 'Opt', 'Param', 'Sink', 'hidden']);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('no @internal declaration ships in dist/src', () => {
  // stripInternal drops a declaration marked `@internal` together with its comment; one still present
  // (a marker the compiler did not see, e.g. after the declaration's name) would ship as public API.
  const shipped = readdirSync(distSrc, { recursive: true, encoding: 'utf8' }).filter(
    (f) => f.endsWith('.d.ts') && readFileSync(path.join(distSrc, f), 'utf8').includes('@internal'),
  );
  assert.deepEqual(shipped, []);
});

/**
 * The root's names, sorted. A user of arrays and the default allocator needs these; the rest is in a
 * subpath. Adding a name here is a decision about the first page of the API: the root stays at most 80.
 */
const ROOT: readonly string[] = [
  'AsyncCopyOptions',
  'CUresult',
  'Context',
  'ContextOptions',
  'ContextSchedule',
  'CopyEndpoint',
  'CopyInOptions',
  'CopyOptions',
  'CopyOutOptions',
  'Counter',
  'Gauge',
  'CudaError',
  'DType',
  'DTypeName',
  'DetachedBufferError',
  'Device',
  'DeviceArray',
  'DeviceArrayFromOptions',
  'DeviceArrayOptions',
  'DeviceBuffer',
  'DeviceBufferOptions',
  'DoubleFreeError',
  'Event',
  'EventOptions',
  'FreeOptions',
  'HostArray',
  'HostArrayFromOptions',
  'HostBuffer',
  'HostBufferOptions',
  'HostData',
  'HostInput',
  'HostTypedArray',
  'InvalidPointerError',
  'ManagedBuffer',
  'ManagedBufferOptions',
  'MemoryResource',
  'MemoryStats',
  'MemsetOptions',
  'NotSupportedError',
  'OutOfMemoryDetails',
  'OutOfMemoryError',
  'OutOfMemoryReason',
  'OutOfMemoryStatistics',
  'PitchedDeviceBuffer',
  'PitchedOptions',
  'ScalarName',
  'Shape',
  'Stream',
  'StreamOptions',
  'StreamRef',
  'UseAfterFreeError',
  'VectorName',
  'VramError',
  'VramStateError',
  'arange',
  'astype',
  'backendFallbackReason',
  'dtypeOf',
  'dtypes',
  'emptyCache',
  'fill',
  'getBackend',
  'getCurrentResource',
  'isOutOfMemory',
  'keep',
  'memoryStats',
  'memorySummary',
  'resetPeakStats',
  'setCurrentResource',
  'sum',
  'tidy',
];

/** Every name the root exported before the subpaths (`git show` of src/index.ts before issue 20). */
const OLD_ROOT: readonly string[] = [
  'ALLOCATION_LOG_HEADER',
  'ALLOCATOR_NAMES',
  'Allocation',
  'AllocationStatistics',
  'AllocationTrace',
  'AllocatorName',
  'AnyHostTypedArray',
  'ArenaOptions',
  'ArenaResource',
  'ArgOf',
  'ArgsOf',
  'AsyncCopyOptions',
  'AsyncPoolOptions',
  'AsyncResource',
  'AsyncResourceOptions',
  'Backend',
  'BenchFigure',
  'BenchReportInput',
  'BenchSkipped',
  'BinningOptions',
  'BinningResource',
  'BlockState',
  'BorrowedStreamOptions',
  'CUresult',
  'CompileError',
  'CompileOptions',
  'CompileStatistics',
  'ComponentInput',
  'ComponentOf',
  'ComponentOutput',
  'ComponentTuple',
  'ComponentsOf',
  'Context',
  'ContextOptions',
  'ContextSchedule',
  'Copy2DFromOptions',
  'Copy2DOptions',
  'CopyEndpoint',
  'CopyInOptions',
  'CopyOptions',
  'CopyOutOptions',
  'Counter',
  'CudaArrayInterface',
  'CudaArrayInterfaceInfo',
  'CudaError',
  'CudaResource',
  'CurrentAndPeak',
  'DEFAULT_RESOURCE_VARIABLES',
  'DLDataTypeCode',
  'DLDeviceType',
  'DLPACK_FLAG_IS_COPIED',
  'DLPACK_FLAG_READ_ONLY',
  'DLPackImportInfo',
  'DType',
  'DTypeKind',
  'DTypeName',
  'DefaultResourceSettings',
  'DetachedBufferError',
  'Device',
  'DeviceArray',
  'DeviceArrayFromOptions',
  'DeviceArrayMemory',
  'DeviceArrayOptions',
  'DeviceArrayPointerOptions',
  'DeviceArrayViewOptions',
  'DeviceBuffer',
  'DeviceBufferOptions',
  'DeviceInfo',
  'DeviceMemory',
  'Dim3',
  'DotOptions',
  'DoubleFreeError',
  'DriverResource',
  'ElementValue',
  'ElementwiseValues',
  'EmulatedBackend',
  'EmulatedBackendOptions',
  'EmulatedKernel',
  'EmulatedKernels',
  'EmulatedLaunch',
  'EmulatedMemory',
  'EnvironmentValues',
  'EnvironmentVariableDescription',
  'Event',
  'EventOptions',
  'FixedSizeOptions',
  'FixedSizeResource',
  'Float16ArrayLike',
  'Float16Input',
  'ForeignDeviceBuffer',
  'ForeignMemoryKind',
  'ForeignPointerOptions',
  'FreeOptions',
  'FromCudaArrayInterfaceOptions',
  'FromDLPackOptions',
  'FunctionAttributes',
  'GrowthCalls',
  'GrowthFigures',
  'Handle',
  'HistoryEvent',
  'HistoryEventKind',
  'HistoryLiveBlock',
  'HistoryOptions',
  'HostArray',
  'HostArrayFromOptions',
  'HostArrayViewOptions',
  'HostBuffer',
  'HostBufferOptions',
  'HostData',
  'HostInput',
  'HostMemory',
  'HostRegisterOptions',
  'HostTypedArray',
  'ImportIpcOptions',
  'ImportPointerOptions',
  'ImportPoolOptions',
  'ImportedPool',
  'InferableTypedArray',
  'InferredDType',
  'InputFileError',
  'InvalidPointerError',
  'IpcBuffer',
  'IpcHandle',
  'JoinClock',
  'Kernel',
  'KernelLimits',
  'KernelParams',
  'Lane',
  'LaunchConfig',
  'Layout',
  'LeakListener',
  'LeakRecord',
  'LeakStatistics',
  'LimitingAdaptor',
  'LiveSite',
  'LoadOptions',
  'LogSink',
  'LoggingAdaptor',
  'LoggingOptions',
  'ManagedAdvice',
  'ManagedAttach',
  'ManagedBuffer',
  'ManagedBufferOptions',
  'ManagedResource',
  'ManagedResourceOptions',
  'MapBlock',
  'MapOptions',
  'MapSegment',
  'MapSite',
  'MemInfo',
  'MemLocation',
  'MemPoolAttribute',
  'MemPoolProps',
  'Memcpy2D',
  'MemoryCap',
  'MemoryFigures',
  'MemoryHistory',
  'MemoryKind',
  'MemoryMapSection',
  'MemoryResource',
  'MemorySnapshot',
  'MemoryStats',
  'MemsetOptions',
  'Module',
  'ModuleImage',
  'NestedArray',
  'NestedElement',
  'NotSupportedError',
  'NvrtcError',
  'NvrtcUnavailableError',
  'OOM_SNAPSHOT_VARIABLE',
  'OpOptions',
  'OrderEvents',
  'OutOfMemoryDetails',
  'OutOfMemoryError',
  'OutOfMemoryEvent',
  'OutOfMemoryReason',
  'OutOfMemoryStatistics',
  'ParamSlot',
  'ParamType',
  'PeakBlock',
  'PinnedChunk',
  'PinnedHostOptions',
  'PinnedHostPool',
  'PinnedHostPoolOptions',
  'PinnedHostResource',
  'PitchedArrayOptions',
  'PitchedBlock',
  'PitchedDeviceBuffer',
  'PitchedOptions',
  'PlaceOptions',
  'Placement',
  'PlotAxis',
  'PlotSection',
  'PlotSeries',
  'PointerArg',
  'PointerAttributes',
  'PoolAccess',
  'PoolOptions',
  'PoolResource',
  'PoolStatistics',
  'Ptr',
  'ReceiveFdOptions',
  'ReceivedFd',
  'ReduceOptions',
  'RegistrationPolicy',
  'RegistrationStatistics',
  'Release',
  'ReplayError',
  'ReplayOptions',
  'ReplayPass',
  'ReplayReportInput',
  'ReplayReportStack',
  'ReplayResult',
  'ReplayTimeline',
  'Report',
  'ReportSection',
  'ReservedSource',
  'ReservingResource',
  'ResourceAdaptor',
  'ResourceRecord',
  'ResourceStatus',
  'RetryOnOutOfMemory',
  'RetryOptions',
  'SNAPSHOT_VERSION',
  'ScalarHostArrays',
  'ScalarName',
  'ScalarParam',
  'ScalarValue',
  'SegmentKind',
  'Shape',
  'Signature',
  'SliceRange',
  'SliceSpec',
  'SnapshotBaseline',
  'SnapshotBlock',
  'SnapshotError',
  'SnapshotFigures',
  'SnapshotFormatError',
  'SnapshotHistory',
  'SnapshotLiveBlock',
  'SnapshotOptions',
  'SnapshotPages',
  'SnapshotResource',
  'SnapshotSegment',
  'SnapshotStack',
  'SnapshotTrigger',
  'SnapshotTriggerKind',
  'StatisticsAdaptor',
  'Stream',
  'StreamOptions',
  'StreamOrder',
  'StreamRef',
  'StreamWatcher',
  'StridedArray',
  'SuggestedBlockSize',
  'SystemCallError',
  'TableSection',
  'ToCudaArrayInterfaceOptions',
  'ToDLPackOptions',
  'TraceAction',
  'TraceEvent',
  'TraceParseError',
  'TraceSummary',
  'TrackedAllocation',
  'TrackingAdaptor',
  'TrackingOptions',
  'TransferCount',
  'TransferOptions',
  'TransferSettings',
  'TransferStatistics',
  'TypedArrayClass',
  'TypedArrayConstructor',
  'UseAfterFreeError',
  'ValueUnit',
  'VectorName',
  'ViewOptions',
  'VramError',
  'VramStateError',
  'WritableNumbers',
  'arange',
  'ascontiguous',
  'astype',
  'backendFallbackReason',
  'benchReport',
  'bfloat16Bits',
  'captureAllocationStacks',
  'closeFd',
  'compileStatistics',
  'configureTransfers',
  'createDefaultResource',
  'cudaArrayInterfaceInfo',
  'decodeBfloat16',
  'decodeFloat16',
  'defaultPlacementMargin',
  'defaultStream',
  'deleteDLPack',
  'dlpackExportsHeld',
  'dlpackInfo',
  'dot',
  'dtypeOf',
  'dtypes',
  'elementwise',
  'emptyCache',
  'encodeBfloat16',
  'encodeFloat16',
  'exportIpc',
  'exportPool',
  'exportPoolPointer',
  'fill',
  'float16Bits',
  'fromBfloat16Bits',
  'fromCudaArrayInterface',
  'fromDLPack',
  'fromFloat16Bits',
  'getBackend',
  'getCurrentResource',
  'hostArrayType',
  'importIpc',
  'importPool',
  'isDTypeName',
  'isOutOfMemory',
  'isReserving',
  'kernelCacheDirectory',
  'leakStatistics',
  'map',
  'max',
  'memoryHistory',
  'memorySnapshot',
  'memoryStats',
  'memorySummary',
  'min',
  'nvrtcAvailable',
  'onLeak',
  'onOutOfMemory',
  'parseAllocationLog',
  'place',
  'readAllocationLog',
  'readDefaultResourceSettings',
  'receiveFd',
  'recordMemoryHistory',
  'releaseTransferCaches',
  'renderReport',
  'replay',
  'replayReport',
  'resetLeakStatistics',
  'resetPeakStats',
  'sendFd',
  'setBackend',
  'setCurrentResource',
  'snapshotReport',
  'sum',
  'threadCount',
  'toCudaArrayInterface',
  'toDLPack',
  'transferSettings',
  'transferStatistics',
  'validateSnapshot',
  'vectorTable',
  'watchStreamDestroy',
  'zipWith',
];

/** The names an entry point's declarations export, sorted. */
function exportedNames(): Map<string, string[]> {
  const { checker, modules } = entryProgram(entries.map((e) => e.declarations));
  return new Map(
    entries.map((e, i) => [
      e.specifier,
      checker
        .getExportsOfModule(modules[i]!)
        .map((s) => s.name)
        .sort(),
    ]),
  );
}

test('the root exports exactly ROOT, at most 80 names', () => {
  const names = exportedNames().get('vram');
  assert.deepEqual(names, [...ROOT].sort(), 'the root changed: update ROOT in this test only if the name belongs on the first page');
  assert.ok(ROOT.length <= 80, `the root has ${ROOT.length} names`);
});

/**
 * Old root names retired on purpose in this release (each with a CHANGELOG line): the second
 * statistics channel (`isReserving`, `ReservingResource`: every resource reports `reservedBytes`), the
 * `{ current, peak }` shape (`CurrentAndPeak`, now `Gauge`), the statistics beside the figures
 * (`PoolStatistics` and `GrowthCalls`, now `GrowthFigures` and `DriverCalls`; `AllocationStatistics`,
 * now `MemoryFigures`), and `defaultStream`, a second name for the legacy default stream (`Stream.default()`).
 */
const RETIRED: readonly string[] = [
  'AllocationStatistics',
  'CurrentAndPeak',
  'GrowthCalls',
  'PoolStatistics',
  'ReservingResource',
  'defaultStream',
  'isReserving',
];

test('every name the old root exported is exported by the root or a subpath, or retired on purpose', () => {
  const all = new Set([...exportedNames().values()].flat());
  assert.deepEqual(
    OLD_ROOT.filter((n) => !all.has(n) && !RETIRED.includes(n)),
    [],
  );
});

test("each entry point's JavaScript module exports the values its declarations promise", async () => {
  const { checker, modules } = entryProgram(entries.map((e) => e.declarations));
  for (const [i, entry] of entries.entries()) {
    const values = checker
      .getExportsOfModule(modules[i]!)
      .filter((s) => (resolveAlias(checker, s).flags & ts.SymbolFlags.Value) !== 0)
      .map((s) => s.name)
      .sort();
    const loaded = Object.keys((await import(pathToFileURL(entry.module).href)) as object).sort();
    assert.deepEqual(loaded, values, `${entry.specifier}: runtime exports differ from its declarations`);
  }
});

test('the API reference (typedoc.json) documents every entry point, each under the name it is imported by', () => {
  const root = path.resolve(distSrc, '../..');
  const { config, error } = ts.parseConfigFileTextToJson('typedoc.json', readFileSync(path.join(root, 'typedoc.json'), 'utf8'));
  assert.equal(error, undefined, 'typedoc.json does not parse');
  const sources = entries.map((e) =>
    path
      .relative(root, e.declarations)
      .replace(/^dist\//, '')
      .replace(/\.d\.ts$/, '.ts'),
  );
  assert.deepEqual(
    [...(config as { entryPoints: string[] }).entryPoints].sort(),
    [...sources].sort(),
    'typedoc.json entryPoints differ from package.json "exports"',
  );
  for (const [i, entry] of entries.entries()) {
    const tag = /@module (\S+)/.exec(readFileSync(path.join(root, sources[i]!), 'utf8'));
    assert.equal(tag?.[1], entry.specifier, `${sources[i]}: its header's @module names the page of ${entry.specifier}`);
  }
});
