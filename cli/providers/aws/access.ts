/**
 * What to tell a user whose AWS call failed for a reason of their machine or account rather than of
 * Ferry: no network, or credentials AWS refused. Kept apart from the toolkit (cli/providers/toolkit.ts)
 * so the CLI's last-resort error report (cli/main.ts) can use it without loading the CDK.
 */

// The toolkit is asked for color: false; this strips any color a message still carries (a colour code
// before a word would also hide it from a \b).
const ansiColor = new RegExp(`${String.fromCharCode(27)}\\[[0-9;]*m`, 'g');
export const stripAnsi = (text: string) => text.replace(ansiColor, '');

export const credentialsHint =
  'Set AWS credentials (AWS_PROFILE, or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and AWS_REGION.';

/**
 * Node's errors for a call that never reached AWS: no DNS answer (a machine offline, or an AWS_REGION
 * no endpoint is named after), refused, reset or timed out on the way (a proxy, a firewall).
 */
const unreachable = /\b(ENOTFOUND|EAI_AGAIN|ECONNREFUSED|ECONNRESET|ETIMEDOUT|EHOSTUNREACH|ENETUNREACH)\b/;

/**
 * The hint for an AWS call that failed before AWS could judge it (the network), or was refused for
 * its credentials; undefined for anything else. Credentials are not the fix for a call that never
 * left the machine, which is what this hint said to every failed lookup before.
 */
export function awsAccessHint(error: unknown): string | undefined {
  const code = (error as { code?: unknown })?.code;
  const message = stripAnsi((error as Error)?.message ?? String(error));
  if (unreachable.test(typeof code === 'string' ? `${code} ${message}` : message)) {
    return "AWS did not answer: check this machine's network (and HTTPS_PROXY if it needs one), and that AWS_REGION names a region.";
  }
  // AWS's refusal is in the error's name, the SDK's copy of AWS's error code ("InvalidClientTokenId",
  // with the message "The security token included in the request is invalid."; the common errors of
  // every Query API: https://docs.aws.amazon.com/IAM/latest/APIReference/CommonErrors.html); the
  // messages of the SDK's own credential chain name it in words.
  const name = (error as { name?: unknown })?.name;
  if (
    /credential|ExpiredToken|could not load|Unable to resolve AWS account|InvalidClientTokenId|SignatureDoesNotMatch|UnrecognizedClient/i.test(
      typeof name === 'string' ? `${name} ${message}` : message,
    )
  )
    return credentialsHint;
  return undefined;
}

/** Whether `error` came back from an AWS SDK call (v3 puts `$metadata` on every error it throws). */
export function isAwsSdkError(error: unknown): boolean {
  return typeof error === 'object' && error !== null && '$metadata' in error;
}
