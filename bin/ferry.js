#!/usr/bin/env node
// The compiled CLI (`npm run build` writes dist/). Kept tiny so `ferry` starts fast.
import { main } from '../dist/cli/main.js';

await main();
