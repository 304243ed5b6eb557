#!/usr/bin/env node
// The `vram` command: a launcher for the compiled CLI, so the package's bin needs no build step of its own.
import '../dist/src/cli/main.js';
