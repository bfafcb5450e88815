/**
 * What the platform keeps when its stack is deleted: the tables (keys, records, jobs), the bucket
 * (artifacts) and the image repositories (images take tens of minutes to rebuild). docs/aws.md
 * "What is kept when stacks are deleted" lists them and what a fresh platform deploy then implies.
 *
 * Kept on delete and on replacement, but not when the create that made them rolls back. A plain
 * `Retain` also holds during that rollback, so a failed first platform deploy left the repositories
 * behind under their fixed names (`ferry/agent`, ...), and every retry of the create (the CLI deletes
 * a ROLLBACK_COMPLETE stack and creates it again) failed on the names already taken; the tables and
 * the bucket were left behind as orphans. AWS: "RetainExceptOnCreate behaves like Retain for stack
 * operations, except for the stack operation that initially created the resource. If the stack
 * operation that created the resource is rolled back, CloudFormation deletes the resource."
 * (https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/aws-attribute-deletionpolicy.html).
 * CDK's RETAIN_ON_UPDATE_OR_DELETE writes that DeletionPolicy and UpdateReplacePolicy `Retain`.
 * A failed first create has nothing worth keeping: it ran no job, built no image, issued no key.
 */
import { RemovalPolicy } from 'aws-cdk-lib';

export const keptWhenStackDeleted = RemovalPolicy.RETAIN_ON_UPDATE_OR_DELETE;
