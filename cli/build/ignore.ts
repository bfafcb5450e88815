/**
 * The common subset of .gitignore: comments, blank lines, `!` negation, `dir/` (directories only),
 * anchored patterns (a `/` anywhere but the end), `*`, `?`, `[...]` and `**`. The last matching rule
 * wins, and, as in git, nothing below an ignored directory can be re-included.
 */

export interface IgnoreRule {
  /** The pattern as written, with where it came from, for messages ("`.gitignore:3: helpers/`"). */
  source: string;
  negated: boolean;
  directoryOnly: boolean;
  regex: RegExp;
}

/** Parses one .gitignore file whose folder is `base` (project-relative POSIX, '' for the root). */
export function parseIgnoreFile(text: string, base: string, origin: string): IgnoreRule[] {
  const rules: IgnoreRule[] = [];
  text.split(/\r?\n/).forEach((rawLine, index) => {
    let line = rawLine.replace(/(?<!\\)\s+$/, '');
    if (line === '' || line.startsWith('#')) return;
    let negated = false;
    if (line.startsWith('!')) {
      negated = true;
      line = line.slice(1);
    } else if (line.startsWith('\\!') || line.startsWith('\\#')) {
      line = line.slice(1);
    }
    let directoryOnly = false;
    if (line.endsWith('/')) {
      directoryOnly = true;
      line = line.replace(/\/+$/, '');
    }
    if (line === '') return;
    // A slash at the start or in the middle anchors the pattern to the .gitignore's folder.
    const anchored = line.includes('/');
    line = line.replace(/^\//, '');
    const body = globToRegex(line);
    const prefix = base === '' ? '' : `${escapeRegex(base)}/`;
    const regex = anchored ? new RegExp(`^${prefix}${body}$`) : new RegExp(`^${prefix}(?:.*/)?${body}$`);
    rules.push({ source: `${origin}:${index + 1}: ${rawLine.trim()}`, negated, directoryOnly, regex });
  });
  return rules;
}

/** The rule that decides `relPath` (last match wins), or undefined when none matches. */
export function matchRules(
  rules: readonly IgnoreRule[],
  relPath: string,
  isDirectory: boolean,
): IgnoreRule | undefined {
  let decided: IgnoreRule | undefined;
  for (const rule of rules) {
    if (rule.directoryOnly && !isDirectory) continue;
    if (rule.regex.test(relPath)) decided = rule;
  }
  return decided;
}

function escapeRegex(text: string): string {
  return text.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

function globToRegex(glob: string): string {
  let out = '';
  for (let i = 0; i < glob.length; i++) {
    const char = glob[i]!;
    if (char === '*') {
      if (glob[i + 1] === '*') {
        const before = i === 0 || glob[i - 1] === '/';
        const after = glob[i + 2] === '/' || i + 2 === glob.length;
        if (before && after) {
          if (glob[i + 2] === '/') {
            out += '(?:.*/)?'; // `**/` : zero or more folders
            i += 2;
          } else {
            out += '.*'; // trailing `/**` : everything inside
            i += 1;
          }
          continue;
        }
      }
      out += '[^/]*';
    } else if (char === '?') {
      out += '[^/]';
    } else if (char === '[') {
      const close = glob.indexOf(']', i + 2);
      if (close === -1) {
        out += '\\[';
      } else {
        let set = glob.slice(i + 1, close);
        if (set.startsWith('!')) set = `^${set.slice(1)}`;
        out += `[${set.replace(/\\/g, '\\\\')}]`;
        i = close;
      }
    } else if (char === '\\' && i + 1 < glob.length) {
      out += escapeRegex(glob[i + 1]!);
      i += 1;
    } else {
      out += escapeRegex(char);
    }
  }
  return out;
}
