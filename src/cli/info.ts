/**
 * `vram info [--json] [--verbose]`: what this process would run on, and the `VRAM_*` settings it
 * runs with. The report is collected as data first (so `--json` and the text view cannot disagree)
 * and says plainly when the backend is emulated and why, never presenting host memory as a GPU.
 */
import { readFileSync } from 'node:fs';
import type { Backend, DeviceInfo } from '../backend/backend.js';
import { BACKEND_VARIABLE, backendFallbackReason, getBackend } from '../backend/select.js';
import { driverCandidates } from '../cuda/library.js';
import { Device } from '../device.js';
import { environmentSettings, unknownVariables, type EnvironmentSetting } from './environment-table.js';
import { chooseAllocator, readDefaultResourceSettings } from '../resource/default-resource.js';
import { parseCommandArgs } from './args.js';
import { formatBytes } from '../util/size.js';
import { commandBackend } from './fallback-warning.js';
import { formatPairs } from './format.js';
import { formatEnvironment } from './usage.js';

/** One device as `vram info` reports it: the backend's DeviceInfo plus free memory now. */
export interface DeviceReport extends DeviceInfo {
  readonly freeMemory: number;
}

/** Everything `vram info` knows, as printed by `--json`. */
export interface InfoReport {
  readonly backend: Backend['name'];
  /** Why this is the emulated backend (auto fell back, or VRAM_BACKEND chose it); absent on cuda. */
  readonly emulatedReason?: string;
  /** The kernel driver's version (e.g. `580.65.06`) when the NVIDIA module reports it. */
  readonly driverVersion: string | null;
  /** The CUDA version the driver supports, e.g. `13.0`. */
  readonly cudaVersion: string;
  readonly devices: readonly DeviceReport[];
  /** Every `VRAM_*` variable with its value (undefined: unset, the default applies). */
  readonly environment: readonly EnvironmentSetting[];
  /** Settings vram refuses, one message each (naming the variable): `vram info` exits 1 when any. */
  readonly problems: readonly string[];
  /** Settings vram takes but that do not do what they seem to (a limit above the device's memory), and `VRAM_*` variables it reads nowhere. */
  readonly warnings: readonly string[];
}

/**
 * Checks the settings as the library will read them: each variable with its own reader (the
 * `problem` of its setting), then the default resource's variables together and against each
 * device, as the first allocation would (both caps set; an allocator the device cannot run).
 *
 * @param settings From `environmentSettings()`.
 * @param devices The devices, when the backend started (a bad backend variable stops it).
 * @returns What is refused, and what is taken but means less than it says.
 * @example
 * ```ts
 * const { problems } = checkSettings(environmentSettings(), []);
 * ```
 */
export function checkSettings(settings: readonly EnvironmentSetting[], devices: readonly DeviceInfo[]): { problems: string[]; warnings: string[] } {
  const problems = settings.flatMap((s) => (s.problem === undefined ? [] : [s.problem]));
  const warnings: string[] = [];
  const resourceVariables = ['VRAM_ALLOCATOR', 'VRAM_MEMORY_LIMIT', 'VRAM_MEMORY_FRACTION'];
  if (settings.some((s) => s.problem !== undefined && resourceVariables.includes(s.name))) return { problems, warnings };
  try {
    const resource = readDefaultResourceSettings();
    for (const device of devices) {
      try {
        chooseAllocator(resource, device);
      } catch (error) {
        problems.push(error instanceof Error ? error.message : String(error));
      }
      if (resource.cap?.kind === 'limit' && resource.cap.bytes > device.totalMemory) {
        warnings.push(
          `VRAM_MEMORY_LIMIT=${formatBytes(resource.cap.bytes)} is above device ${device.ordinal}'s ` +
            `${formatBytes(device.totalMemory)}: it never applies there, the device's memory runs out first`,
        );
      }
    }
  } catch (error) {
    problems.push(error instanceof Error ? error.message : String(error));
  }
  return { problems, warnings };
}

/** Why the process runs on the emulated backend, in words; undefined for the real driver. */
export function emulatedReason(backend: Backend): string | undefined {
  if (backend.name !== 'emulated') return undefined;
  const fallback = backendFallbackReason();
  if (fallback !== undefined) return fallback;
  return BACKEND_VARIABLE.read() === 'emulated' ? 'selected by VRAM_BACKEND=emulated' : 'the emulated backend was selected by the program';
}

/**
 * The one-line backend description that heads `info` and `bench` output.
 *
 * @param backend The backend in use.
 * @param verbose Say why in full (every driver path searched) rather than in a few words.
 * @returns `cuda`, `emulated (no GPU: ...)` or `emulated (selected by ...)`.
 * @example
 * ```ts
 * describeBackend(getBackend()); // 'emulated (no GPU: no CUDA driver library found; --verbose lists the 6 paths searched)'
 * ```
 */
export function describeBackend(backend: Backend, verbose = false): string {
  if (backend.name === 'cuda') return `cuda (driver ${kernelDriverVersion() ?? 'unknown'}, CUDA ${formatCudaVersion(backend.driverVersion())})`;
  return describeBackendName(backend.name, emulatedReason(backend), verbose);
}

/**
 * The `driver search` line for `--verbose`, or undefined where the backend line already lists every
 * path with why it failed (auto fell back because no driver library loaded).
 *
 * @param backend The backend in use.
 * @returns The candidates in order, or undefined.
 * @example
 * ```ts
 * const search = verboseDriverSearch(getBackend());
 * if (search !== undefined) pairs.push(['driver search', search]);
 * ```
 */
export function verboseDriverSearch(backend: Backend): string | undefined {
  return listsSearchedPaths(emulatedReason(backend)) ? undefined : driverSearchPath();
}

/** True for the loader's failure, which names every path it tried and why each failed. */
function listsSearchedPaths(reason: string | undefined): boolean {
  return reason?.startsWith('cannot load the CUDA driver library') === true;
}

/**
 * The fallback reason in a few words: the loader's message lists every path it tried (six on
 * Linux, a 420-character line), which is for `--verbose`.
 */
function shortReason(reason: string): string {
  if (!listsSearchedPaths(reason)) return reason;
  const count = driverCandidates().length;
  return `no CUDA driver library found; --verbose lists the ${count} path${count === 1 ? '' : 's'} searched`;
}

/** `cuda`, `emulated (no GPU: <why auto fell back>)`, or `emulated (selected by ...)`. */
function describeBackendName(name: Backend['name'], reason: string | undefined, verbose: boolean): string {
  if (reason === undefined) return name;
  if (backendFallbackReason() === undefined) return `${name} (${reason})`;
  return `${name} (no GPU: ${verbose ? reason : shortReason(reason)})`;
}

/**
 * Where the CUDA driver library is looked for, in order (for `--verbose`).
 *
 * @returns One line.
 * @example
 * ```ts
 * driverSearchPath(); // 'libcuda.so.1, /usr/local/nvidia/lib64/libcuda.so.1, ...'
 * ```
 */
export function driverSearchPath(): string {
  return driverCandidates().join(', ');
}

/** CUDA's integer version (13000) as people write it (13.0). */
export function formatCudaVersion(version: number): string {
  return `${Math.floor(version / 1000)}.${Math.floor((version % 1000) / 10)}`;
}

/** The NVIDIA kernel module's version, read from sysfs; null when there is none (no GPU, not Linux). */
function kernelDriverVersion(): string | null {
  try {
    return readFileSync('/sys/module/nvidia/version', 'utf8').trim() || null;
  } catch {
    return null;
  }
}

/** Collects the report for the process-wide backend. */
export function collectInfo(): InfoReport {
  const backend = getBackend();
  const devices: DeviceReport[] = [];
  const count = backend.deviceCount();
  for (let ordinal = 0; ordinal < count; ordinal++) {
    const device = Device.get(ordinal);
    devices.push({ ...device.info, freeMemory: device.memInfo().free });
  }
  const reason = emulatedReason(backend);
  const environment = environmentSettings();
  const { problems, warnings } = checkSettings(environment, devices);
  return {
    backend: backend.name,
    ...(reason === undefined ? {} : { emulatedReason: reason }),
    driverVersion: backend.name === 'cuda' ? kernelDriverVersion() : null,
    cudaVersion: formatCudaVersion(backend.driverVersion()),
    devices,
    environment,
    problems,
    warnings: [...warnings, ...unknownVariables()],
  };
}

const yesNo = (flag: boolean): string => (flag ? 'yes' : 'no');

/** The text view of one device: an aligned list of attribute and value. */
function formatDevice(d: DeviceReport): string {
  const rows: (readonly [string, string])[] = [
    ['uuid', d.uuid],
    ['compute capability', d.computeCapability.join('.')],
    ['memory', `${formatBytes(d.totalMemory)} total, ${formatBytes(d.freeMemory)} free`],
    ['pci bus id', d.pciBusId],
    ['multiprocessors', String(d.multiprocessorCount)],
    ['l2 cache', formatBytes(d.l2CacheSize)],
    ['async copy engines', String(d.asyncEngineCount)],
    ['unified addressing', yesNo(d.unifiedAddressing)],
    ['can map host memory', yesNo(d.canMapHostMemory)],
    ['managed memory', yesNo(d.managedMemory)],
    ['concurrent managed access', yesNo(d.concurrentManagedAccess)],
    ['memory pools', yesNo(d.memoryPoolsSupported)],
    ['virtual memory management', yesNo(d.virtualMemoryManagementSupported)],
    ['texture pitch alignment', `${d.texturePitchAlignment} B`],
    ['integrated', yesNo(d.integrated)],
  ];
  return `device ${d.ordinal}: ${d.name}\n${formatPairs(rows, '  ')}`;
}

/** The text view of the whole report; `verbose` gives the backend's reason in full and the driver search path. */
export function formatInfo(report: InfoReport, verbose = false): string {
  const backend = describeBackendName(report.backend, report.emulatedReason, verbose);
  const driver =
    report.backend === 'emulated' ? `none (emulating CUDA ${report.cudaVersion})` : `${report.driverVersion ?? 'unknown'} (CUDA ${report.cudaVersion})`;
  const pairs: (readonly [string, string])[] = [
    ['backend', backend],
    ['driver', driver],
  ];
  if (verbose && !listsSearchedPaths(report.emulatedReason)) pairs.push(['driver search', driverSearchPath()]);
  pairs.push(['devices', String(report.devices.length)]);
  return [
    formatPairs(pairs),
    ...report.devices.map(formatDevice),
    `environment:\n${formatEnvironment(undefined, report.environment).replace(/^/gm, '  ')}`,
  ].join('\n\n');
}

/** Entry point of `vram info`. */
export async function infoCommand(args: string[]): Promise<number> {
  const { values } = parseCommandArgs('info', args, {
    json: { type: 'boolean', default: false },
    verbose: { type: 'boolean', default: false },
  });
  let report: InfoReport;
  try {
    commandBackend('info');
    report = collectInfo();
  } catch (error) {
    // A bad VRAM_BACKEND or VRAM_EMULATED_BYTES stops the backend: name every bad variable, not
    // only the one that tripped first.
    const { problems } = checkSettings(environmentSettings(), []);
    if (problems.length === 0) throw error;
    return reportSettings(problems, unknownVariables());
  }
  process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatInfo(report, values.verbose)}\n`);
  return reportSettings(report.problems, report.warnings);
}

/** Each refused setting and each warning on a line of stderr; exit status 1 when any is refused. */
function reportSettings(problems: readonly string[], warnings: readonly string[]): number {
  for (const problem of problems) process.stderr.write(`vram info: ${problem}\n`);
  for (const warning of warnings) process.stderr.write(`vram info: warning: ${warning}\n`);
  return problems.length > 0 ? 1 : 0;
}
