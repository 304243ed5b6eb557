/**
 * `vram info [--json]`: what this process would run on. The report is collected as data first
 * (so `--json` and the text view cannot disagree) and says plainly when the backend is emulated and
 * why, never presenting host memory as a GPU.
 */
import { readFileSync } from 'node:fs';
import { parseArgs } from 'node:util';
import type { Backend, DeviceInfo } from '../backend/backend.js';
import { backendFallbackReason, getBackend } from '../backend/select.js';
import { Device } from '../device.js';
import { formatBytes, formatPairs } from './format.js';

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
}

/** Why the process runs on the emulated backend, in words; undefined for the real driver. */
export function emulatedReason(backend: Backend): string | undefined {
  if (backend.name !== 'emulated') return undefined;
  const fallback = backendFallbackReason();
  if (fallback !== undefined) return fallback;
  const choice = process.env.VRAM_BACKEND;
  return choice === 'emulated' ? 'selected by VRAM_BACKEND=emulated' : 'the emulated backend was selected by the program';
}

/** The one-line backend description that heads `info` and `bench` output. */
export function describeBackend(backend: Backend): string {
  return describeBackendName(backend.name, emulatedReason(backend));
}

/** `cuda`, `emulated (no GPU: <why auto fell back>)`, or `emulated (selected by ...)`. */
function describeBackendName(name: Backend['name'], reason: string | undefined): string {
  if (reason === undefined) return name;
  return backendFallbackReason() === undefined ? `${name} (${reason})` : `${name} (no GPU: ${reason})`;
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
  return {
    backend: backend.name,
    ...(reason === undefined ? {} : { emulatedReason: reason }),
    driverVersion: backend.name === 'cuda' ? kernelDriverVersion() : null,
    cudaVersion: formatCudaVersion(backend.driverVersion()),
    devices,
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

/** The text view of the whole report. */
export function formatInfo(report: InfoReport): string {
  const backend = describeBackendName(report.backend, report.emulatedReason);
  const driver = report.backend === 'emulated'
    ? `none (emulating CUDA ${report.cudaVersion})`
    : `${report.driverVersion ?? 'unknown'} (CUDA ${report.cudaVersion})`;
  const header = formatPairs([['backend', backend], ['driver', driver], ['devices', String(report.devices.length)]]);
  return [header, ...report.devices.map(formatDevice)].join('\n\n');
}

/** Entry point of `vram info`. */
export async function infoCommand(args: string[]): Promise<number> {
  const { values } = parseArgs({ args, options: { json: { type: 'boolean', default: false } }, strict: true, allowPositionals: false });
  const report = collectInfo();
  process.stdout.write(values.json ? `${JSON.stringify(report, null, 2)}\n` : `${formatInfo(report)}\n`);
  return 0;
}
