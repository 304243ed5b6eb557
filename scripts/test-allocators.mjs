#!/usr/bin/env node
// `npm run test:allocators`: the files test/allocator-sensitive.json names, compiled (under dist/test/, so after a
// build), on the emulated backend under VRAM_ALLOCATOR (adaptive unless it is set), in one `node --test` run.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';

const root = fileURLToPath(new URL('..', import.meta.url));
const list = JSON.parse(readFileSync(new URL('../test/allocator-sensitive.json', import.meta.url), 'utf8'));
const files = list.files.map((f) => `dist/${f.replace(/\.ts$/, '.js')}`);
const env = { ...process.env, VRAM_BACKEND: 'emulated', VRAM_ALLOCATOR: process.env.VRAM_ALLOCATOR || 'adaptive' };
const run = spawnSync(process.execPath, ['--test', ...files], { cwd: root, env, stdio: 'inherit' });
process.exit(run.status ?? 1);
