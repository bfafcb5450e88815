/**
 * The IAM condition that fences a DynamoDB grant to items whose partition key matches `patterns`
 * (https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/specifying-conditions.html).
 * `ForAllValues:StringLike` alone is true when the request carries no key at all (a Scan); `Null`
 * closes that
 * (https://docs.aws.amazon.com/IAM/latest/UserGuide/reference_policies_condition-single-vs-multi-valued-context-keys.html).
 */
export function leadingKeysCondition(patterns: readonly string[]): Record<string, Record<string, unknown>> {
  return {
    'ForAllValues:StringLike': { 'dynamodb:LeadingKeys': [...patterns] },
    Null: { 'dynamodb:LeadingKeys': 'false' },
  };
}
