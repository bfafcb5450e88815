import type { Reporter } from '../../io.js';
import type { ToolkitEvent, ToolkitEventHandler } from '../toolkit.js';

/** Progress lines from toolkit events: stacks as they start, resources every 10 %, failures always. */
export function eventPrinter(reporter: Reporter): ToolkitEventHandler {
  const lastTenth = new Map<string, number>();
  return (event: ToolkitEvent) => {
    switch (event.type) {
      case 'stack':
        reporter.line(`  ${event.message}`);
        break;
      case 'resources': {
        const failed = /FAILED/.test(event.message);
        const stack = event.stack ?? '';
        const percent =
          event.total && event.completed !== undefined
            ? Math.min(100, Math.round((event.completed / event.total) * 100))
            : undefined;
        const tenth = percent === undefined ? -1 : Math.floor(percent / 10);
        if (!failed && (tenth <= (lastTenth.get(stack) ?? -1) || percent === undefined)) break;
        lastTenth.set(stack, tenth);
        const count = percent === undefined ? '' : `${event.completed}/${event.total} (${percent}%) `;
        reporter.line(`    ${stack} ${count}${event.message}`);
        break;
      }
      case 'done':
        reporter.line(`  ✓ ${event.message}`);
        break;
      case 'warning':
        reporter.line(`  warning: ${event.message}`);
        break;
      case 'error':
        reporter.line(`  error: ${event.message}`);
        break;
    }
  };
}
