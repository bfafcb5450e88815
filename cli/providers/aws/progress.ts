import type { Reporter } from '../../io.js';
import type { ToolkitEvent, ToolkitEventHandler } from '../toolkit.js';

/**
 * The record an ACM certificate waits for, from its CREATE_IN_PROGRESS event's ResourceStatusReason:
 * "Content of DNS Record is: {Name: …,Type: CNAME,Value: …}". Without a Route 53 hosted zone (no
 * FERRY_AWS_HOSTED_ZONE_ID, infra/constructs/https-front.ts) nobody adds it, and "the stack will
 * remain in the CREATE_IN_PROGRESS state" until someone does
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-certificatemanager-certificate.html);
 * this reason is the only place the record shows up.
 */
export function dnsValidationLine(reason: string): string | undefined {
  const at = reason.indexOf('Content of DNS Record');
  if (at < 0) return undefined;
  const content = reason.slice(at);
  const record = /Name:\s*([^,}\s]+)\s*,\s*Type:\s*([^,}\s]+)\s*,\s*Value:\s*([^,}\s]+)/.exec(content);
  // A reason worded otherwise is shown as it is: still the record, just not parsed.
  const what = record ? `${record[2]} ${record[1]} → ${record[3]}` : content;
  return `add this DNS record to validate the certificate: ${what} (the deploy waits until it exists)`;
}

/**
 * Progress lines from toolkit events: stacks as they start, resources every 10 %, failures always,
 * and each DNS record a certificate waits for once (dnsValidationLine).
 */
export function eventPrinter(reporter: Reporter): ToolkitEventHandler {
  const lastTenth = new Map<string, number>();
  const recordsShown = new Set<string>();
  return (event: ToolkitEvent) => {
    switch (event.type) {
      case 'stack':
        reporter.line(`  ${event.message}`);
        break;
      case 'resources': {
        const stack = event.stack ?? '';
        // Shown as soon as it comes, whatever the 10 % step: the stack waits on it, maybe for hours.
        const dns = event.reason ? dnsValidationLine(event.reason) : undefined;
        if (dns && !recordsShown.has(dns)) {
          recordsShown.add(dns);
          reporter.line(`    ${stack} ${dns}`);
        }
        const failed = /FAILED/.test(event.message);
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
