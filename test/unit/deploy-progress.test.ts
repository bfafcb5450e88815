/**
 * Deploy progress from the toolkit's stack activity (cli/providers/toolkit.ts toolkitEventOf, then
 * cli/providers/aws/progress.ts eventPrinter). A certificate requested without a hosted zone holds
 * the stack in CREATE_IN_PROGRESS until its validation record exists, and the record shows up only
 * in the event's ResourceStatusReason
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-certificatemanager-certificate.html):
 * the printer shows it at once, on stderr, once per record.
 */
import { PassThrough, type Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { Reporter } from '../../cli/io.js';
import { eventPrinter } from '../../cli/providers/aws/progress.js';
import { toolkitEventOf } from '../../cli/providers/toolkit.js';

const stack = 'Ferry-demo-production-1a2b3c4d';
const record = { name: '_3f2a9c.lb-worker.example.com.', value: '_9c1d7e.xlfgrmvvlj.acm-validations.aws.' };
const reason = (r: { name: string; value: string }) =>
  `Content of DNS Record is: {Name: ${r.name},Type: CNAME,Value: ${r.value}}`;

/** A CDK_TOOLKIT_I5502 message as @aws-cdk/toolkit-lib sends it: the text, and a StackActivity. */
function activity(
  event: {
    LogicalResourceId: string;
    ResourceType: string;
    ResourceStatus: string;
    ResourceStatusReason?: string;
  },
  completed: number,
) {
  return {
    level: 'info',
    code: 'CDK_TOOLKIT_I5502',
    message: `${stack} | ${completed}/40 | ${event.ResourceStatus} | ${event.ResourceType} | ${event.LogicalResourceId}`,
    data: {
      deployment: 'd-1',
      event: { StackName: stack, Timestamp: new Date(0), ...event },
      progress: { completed, total: 40, formatted: `${completed}/40` },
    },
  };
}

const certificateEvent = (reasonText: string) =>
  activity(
    {
      LogicalResourceId: 'LbWorkerHttpsCertificate1A2B3C4D',
      ResourceType: 'AWS::CertificateManager::Certificate',
      ResourceStatus: 'CREATE_IN_PROGRESS',
      ResourceStatusReason: reasonText,
    },
    2,
  );

function printer() {
  let err = '';
  let out = '';
  // Only write() is used: a plain recorder keeps the lines in order and synchronous.
  const sink = (append: (text: string) => void) =>
    ({
      write: (chunk: string) => {
        append(chunk);
        return true;
      },
    }) as unknown as Writable;
  const reporter = new Reporter({
    stdout: sink((text) => {
      out += text;
    }),
    stderr: sink((text) => {
      err += text;
    }),
    stdin: new PassThrough(),
    interactive: false,
    env: {},
    cwd: '/',
  });
  const onEvent = eventPrinter(reporter);
  return {
    feed: (message: ReturnType<typeof activity>) => {
      const event = toolkitEventOf(message);
      if (event) onEvent(event);
    },
    stderr: () => err,
    stdout: () => out,
  };
}

describe('stack activity of a certificate waiting for DNS validation', () => {
  it('keeps the ResourceStatusReason in the toolkit event', () => {
    expect(toolkitEventOf(certificateEvent(reason(record)))).toEqual({
      type: 'resources',
      stack,
      message: 'CREATE_IN_PROGRESS AWS::CertificateManager::Certificate LbWorkerHttpsCertificate1A2B3C4D',
      completed: 2,
      total: 40,
      reason: reason(record),
    });
  });

  it('prints the CNAME to add once per record, below the 10 % step, and says the deploy waits', () => {
    const out = printer();
    // 1/40 opens the first 10 % step; the certificate's events at 2/40 fall inside it.
    out.feed(
      activity(
        { LogicalResourceId: 'Queue', ResourceType: 'AWS::SQS::Queue', ResourceStatus: 'CREATE_COMPLETE' },
        1,
      ),
    );
    out.feed(certificateEvent('Resource creation Initiated'));
    out.feed(certificateEvent(reason(record)));
    out.feed(certificateEvent(reason(record)));
    const lines = out.stderr().trimEnd().split('\n');
    const cname = `CNAME ${record.name} → ${record.value}`;
    const shown = lines.filter((line) => line.includes(cname));
    expect(shown).toHaveLength(1);
    expect(shown[0]).toContain(stack);
    expect(shown[0]).toMatch(/add this DNS record/);
    expect(shown[0]).toMatch(/the deploy waits until it exists/);
    // Only the step line and the record: no line per event.
    expect(lines).toHaveLength(2);
    expect(out.stdout()).toBe('');

    // Another record (another endpoint's certificate) is shown too, once.
    const other = { name: '_77aa.other.example.com.', value: '_88bb.acm-validations.aws.' };
    out.feed(certificateEvent(reason(other)));
    out.feed(certificateEvent(reason(other)));
    expect(
      out
        .stderr()
        .split('\n')
        .filter((line) => line.includes(`CNAME ${other.name} → ${other.value}`)),
    ).toHaveLength(1);
  });
});
