/** Reads the IAM statements a role ends up with in a synthesized template (inline policies only). */
import { Stack } from 'aws-cdk-lib';
import type { Template } from 'aws-cdk-lib/assertions';
import type * as iam from 'aws-cdk-lib/aws-iam';

export interface Statement {
  Effect: string;
  Action: string | string[];
  Resource: unknown;
  Condition?: unknown;
}

export function statementsOf(template: Template, role: iam.IRole): Statement[] {
  const roleId = Stack.of(role).getLogicalId(role.node.defaultChild as iam.CfnRole);
  const policies = template.findResources('AWS::IAM::Policy');
  const statements: Statement[] = [];
  for (const policy of Object.values(policies)) {
    const roles = (policy.Properties.Roles ?? []) as unknown[];
    if (!roles.some((r) => JSON.stringify(r) === JSON.stringify({ Ref: roleId }))) continue;
    statements.push(...(policy.Properties.PolicyDocument.Statement as Statement[]));
  }
  return statements;
}

export const actionsOf = (statements: Statement[]): string[] =>
  statements.flatMap((s) => (Array.isArray(s.Action) ? s.Action : [s.Action]));

/** Every resource the statements that allow `action` name, as JSON strings. */
export function resourcesFor(statements: Statement[], action: string): string[] {
  return statements
    .filter((s) => actionsOf([s]).includes(action))
    .flatMap((s) => (Array.isArray(s.Resource) ? s.Resource : [s.Resource]))
    .map((r) => JSON.stringify(r));
}
