/**
 * The did-you-mean of every message that names a misspelt key: an options key (`util/options.ts`)
 * or a `VRAM_*` variable (`vram info`).
 */

/** The number of single-character edits (insert, delete, substitute, swap) from `a` to `b`. */
function editDistance(a: string, b: string): number {
  const rows: number[][] = [];
  for (let i = 0; i <= a.length; i++) {
    const row = [i];
    for (let j = 1; j <= b.length; j++) {
      if (i === 0) {
        row.push(j);
        continue;
      }
      const above = rows[i - 1]!;
      let d = Math.min(above[j]! + 1, row[j - 1]! + 1, above[j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) d = Math.min(d, rows[i - 2]![j - 2]! + 1);
      row.push(d);
    }
    rows.push(row);
  }
  return rows[a.length]![b.length]!;
}

/**
 * The valid name nearest to a misspelt one, if one is near enough to be the likely intent: the same
 * letters in another case, or a few edits away (a third of the name's length, at least two).
 *
 * @param key The name as given.
 * @param valid The names that exist.
 * @returns The likely intent, or undefined when none is near.
 * @throws Never.
 * @example
 * ```ts
 * nearestName('shap', ['shape', 'dtype']); // 'shape'
 * ```
 */
export function nearestName(key: string, valid: readonly string[]): string | undefined {
  const lower = key.toLowerCase();
  const sameLetters = valid.find((v) => v.toLowerCase() === lower);
  if (sameLetters !== undefined) return sameLetters;
  let best: string | undefined;
  let bestDistance = Math.max(2, Math.ceil(key.length / 3)) + 1;
  for (const v of valid) {
    const d = editDistance(lower, v.toLowerCase());
    if (d < bestDistance) {
      best = v;
      bestDistance = d;
    }
  }
  return best;
}
