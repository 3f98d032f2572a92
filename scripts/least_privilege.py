"""Least privilege as SAM deploys it (scripts/check-template's check 9): the template transformed
locally with SAM's translator, what `sam deploy` has CloudFormation do, and every role's
statements read as IAM reads them: an action matches with IAM's wildcards (`sqs:*`,
`rds-db:*`, `lambda:Invoke*`, `*`, case-insensitive), and both branches of an `Fn::If` count.

    python scripts/least_privilege.py template.yaml       # the findings, if any (exit 1)
    python scripts/least_privilege.py --mutants template.yaml

The second form checks the checker: it adds to the template, one at a time, a grant each rule
is there to refuse (a wildcard action, a statement in the branch of an `Fn::If` a deployment
would take) and fails unless each is found.
"""

import copy
import fnmatch
import json
import os
import subprocess
import sys

from cfnlint.decode import cfn_yaml
from samtranslator.parser.parser import Parser
from samtranslator.translator.translator import Translator


def listed(value):
    return value if isinstance(value, list) else [value]


def grants(statement, action):
    """True when an Allow statement's actions include `action` (itself a pattern when it ends
    in `*`: then any action of that service counts), as IAM matches them."""
    if statement.get("Effect", "Allow") != "Allow":
        return False
    for granted in listed(statement.get("Action", [])):
        if not isinstance(granted, str):
            continue
        granted, wanted = granted.lower(), action.lower()
        if fnmatch.fnmatchcase(wanted, granted):
            return True
        if wanted.endswith(":*") and granted.split(":")[0] == wanted.split(":")[0] or granted == "*":
            return True
    return False


def statements(role):
    """Every statement of a role's inline policies, each branch of an `Fn::If` among them."""
    def branches(st):
        if isinstance(st, dict) and "Fn::If" in st:
            for branch in st["Fn::If"][1:]:
                yield from branches(branch)
        elif isinstance(st, dict):
            yield st
    for policy in role["Properties"].get("Policies", []):
        for st in policy["PolicyDocument"]["Statement"]:
            yield from branches(st)


def transformed(template):
    template = json.loads(json.dumps(template))
    for body in template["Resources"].values():
        if body.get("Type") == "AWS::Serverless::Function":
            body["Properties"]["CodeUri"] = "s3://bucket/key"  # sam deploy's upload, stood in for
    return Translator(managed_policy_map=None, sam_parser=Parser(), plugins=[]).translate(
        sam_template=template, parameter_values={}, get_managed_policy_map=lambda: {})


def findings(template, names):
    """What breaks least privilege in `template` (a SAM template as loaded), for the receivers
    `names`; and the number of roles read."""
    out = transformed(template)
    bad = []
    roles = {n: r for n, r in out["Resources"].items() if r["Type"] == "AWS::IAM::Role"}
    for name, role in roles.items():
        if any("AWSLambdaSQSQueueExecutionRole" in json.dumps(a)
               for a in role["Properties"].get("ManagedPolicyArns", [])):
            bad.append(f"{name}: AWSLambdaSQSQueueExecutionRole (every queue of the account)")
        for st in statements(role):
            if grants(st, "sqs:*") and "*" in listed(st.get("Resource")):
                bad.append(f"{name}: {st.get('Sid')}: an sqs action on every resource")
            # A receiver trusts what it is invoked with (an EventBridge record carries no
            # signature): no role of the stack may invoke one.
            if grants(st, "lambda:InvokeFunction") \
                    and any(r == "*" or any(f"{n}{kind}" in json.dumps(r) for n in names
                                            for kind in ("Function", "ManagedFunction"))
                            for r in listed(st.get("Resource"))):
                bad.append(f"{name}: {st.get('Sid')}: may invoke a receiver")
    # Every function runs as a role of its own with no managed policy, writing only the log group
    # its LoggingConfig names; every schedule's role is assumable by this account's scheduler alone.
    for fname, fn in out["Resources"].items():
        if fn["Type"] != "AWS::Lambda::Function":
            continue
        role_name = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        group = fn["Properties"].get("LoggingConfig", {}).get("LogGroup", {}).get("Ref")
        role = roles[role_name]["Properties"]
        if role.get("ManagedPolicyArns"):
            bad.append(f"{role_name} ({fname}): managed policies {role['ManagedPolicyArns']}")
        for st in statements(roles[role_name]):
            if grants(st, "logs:*") and listed(st.get("Resource")) != [{"Fn::GetAtt": [group, "Arn"]}]:
                bad.append(f"{role_name} ({fname}): logs beyond {group}")
    for name, role in roles.items():
        trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        if any(isinstance(st.get("Principal"), dict)
               and "scheduler.amazonaws.com" in listed(st["Principal"].get("Service"))
               and st.get("Condition") != {"StringEquals": {"aws:SourceAccount": {"Ref": "AWS::AccountId"}}}
               for st in trust):
            bad.append(f"{name}: a schedule's role without aws:SourceAccount")
    for name in names:
        role = roles.get(f"{name}FunctionRole")
        if role is None:
            bad.append(f"{name}FunctionRole: not in the transformed template")
            continue
        if role["Properties"].get("ManagedPolicyArns"):
            bad.append(f"{name}FunctionRole: managed policies {role['Properties']['ManagedPolicyArns']}")
        own_queues = [{"Fn::GetAtt": [f"{name}{queue}", "Arn"]}
                      for queue in ("SpillQueue", "SpillDeadLetterQueue",
                                    "EventQueue", "EventDeadLetterQueue")]
        for st in statements(role):
            if grants(st, "logs:*") and \
                    listed(st.get("Resource")) != [{"Fn::GetAtt": [f"{name}LogGroup", "Arn"]}]:
                bad.append(f"{name}FunctionRole: logs beyond {name}LogGroup")
            if (grants(st, "sqs:ReceiveMessage") or grants(st, "sqs:DeleteMessage")) and \
                    any(r not in own_queues for r in listed(st.get("Resource"))):
                bad.append(f"{name}FunctionRole: takes messages from a queue not its own")
    # Each function that logs in to the database may connect as its own user alone (stripe-recover
    # as the Stripe receiver's, whose claim it applies through); the others, not at all.
    own_user = {"StripeRecover": "StripeDbUser", "Sweep": "SweepDbUser", "Relay": "RelayDbUser",
                "Migrate": "MigrateDbUser", **{n: f"{n}DbUser" for n in names},
                **{f"{n}Managed": f"{n}DbUser" for n in names}}
    for fname, fn in out["Resources"].items():
        if fn["Type"] != "AWS::Lambda::Function" or not fname.endswith("Function"):
            continue
        role_name = fn["Properties"]["Role"]["Fn::GetAtt"][0]
        connects = [r for st in statements(roles[role_name]) if grants(st, "rds-db:connect")
                    for r in listed(st.get("Resource"))]
        user = own_user.get(fname[: -len("Function")])
        want = [] if user is None else [{"Fn::Sub": "arn:${AWS::Partition}:rds-db:${AWS::Region}:${AWS::AccountId}:dbuser:${DbProxyResourceId}/${" + user + "}"}]
        if connects != want:
            bad.append(f"{role_name} ({fname}): rds-db:connect on {connects}, not its own user ({user})")
    # The endpoints take HTTPS from the functions' security groups alone and open nothing.
    endpoint_sg = out["Resources"].get("VpcEndpointSecurityGroup", {}).get("Properties", {})
    rules = [r["Fn::If"][1] if isinstance(r, dict) and "Fn::If" in r else r
             for r in endpoint_sg.get("SecurityGroupIngress", [])]
    if not rules or any(set(r) != {"IpProtocol", "FromPort", "ToPort", "SourceSecurityGroupId"}
                        or r["FromPort"] != 443 for r in rules):
        bad.append(f"VpcEndpointSecurityGroup: ingress other than 443 from the functions' groups: {rules}")
    if endpoint_sg.get("SecurityGroupEgress") != [{"IpProtocol": "-1", "CidrIp": "127.0.0.1/32"}]:
        bad.append("VpcEndpointSecurityGroup: an egress rule that reaches something")
    # Every output's Ref names what the transformed template has (an output naming a resource SAM
    # generates, such as an event source mapping, is only checked here); the mapping outputs that
    # OPERATIONS.md's commands take a UUID from are mappings.
    def refs(value):
        if isinstance(value, dict):
            if set(value) == {"Ref"}:
                yield value["Ref"]
            for inner in value.values():
                yield from refs(inner)
        elif isinstance(value, list):
            for inner in value:
                yield from refs(inner)
    for output, body in out.get("Outputs", {}).items():
        for ref in refs(body.get("Value")):
            target = out["Resources"].get(ref)
            if target is None and ref not in out.get("Parameters", {}) and not ref.startswith("AWS::"):
                bad.append(f"output {output}: Ref {ref}, which the transformed template does not have")
            elif output.endswith("DrainMapping") and (target or {}).get("Type") != "AWS::Lambda::EventSourceMapping":
                bad.append(f"output {output}: Ref {ref} is not an event source mapping")
    return bad, len(roles)


def receivers():
    return [line.split()[1] for line in subprocess.run(
        ["scripts/template", "--list"], check=True, capture_output=True, text=True).stdout.splitlines()]


def with_statement(template, role, statement):
    """`template` with `statement` added to `role`'s first inline policy."""
    mutant = copy.deepcopy(template)
    mutant["Resources"][role]["Properties"]["Policies"][0]["PolicyDocument"]["Statement"].append(statement)
    return mutant


def mutants(template, names):
    """(what was added, the text its finding must hold) for each grant a rule must refuse."""
    other = next(n for n in names if n != names[0])
    return [
        (with_statement(template, f"{names[0]}FunctionRole",
                        {"Effect": "Allow", "Action": "sqs:*",
                         "Resource": {"Fn::GetAtt": [f"{other}SpillQueue", "Arn"]}}),
         "sqs:* on another receiver's spill queue", "takes messages from a queue not its own"),
        (with_statement(template, f"{names[0]}FunctionRole",
                        {"Effect": "Allow", "Action": "SQS:Receive*",
                         "Resource": {"Fn::GetAtt": [f"{other}SpillQueue", "Arn"]}}),
         "SQS:Receive* on another receiver's spill queue", "takes messages from a queue not its own"),
        (with_statement(template, "SweepFunctionRole",
                        {"Fn::If": ["UseIamAuth", {"Ref": "AWS::NoValue"},
                                    {"Effect": "Allow", "Action": "rds-db:*", "Resource": "*"}]}),
         "rds-db:* in an Fn::If's second branch", "rds-db:connect on"),
        (with_statement(template, "RelayFunctionRole",
                        {"Effect": "Allow", "Action": "lambda:Invoke*",
                         "Resource": {"Fn::GetAtt": [f"{names[0]}Function", "Arn"]}}),
         "lambda:Invoke* on a receiver", "may invoke a receiver"),
        (with_statement(template, "MigrateFunctionRole",
                        {"Fn::If": ["UseIamAuth", {"Effect": "Allow", "Action": "logs:*", "Resource": "*"},
                                    {"Ref": "AWS::NoValue"}]}),
         "logs:* on every log group", "logs beyond"),
    ]


def main(argv):
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")
    names = receivers()
    if argv[0] == "--mutants":
        template = cfn_yaml.load(argv[1])
        missed = []
        for mutant, what, expected in mutants(template, names):
            found = [b for b in findings(mutant, names)[0] if expected in b]
            print(f"  mutant: {what}: {found[0] if found else 'NOT FOUND'}")
            if not found:
                missed.append(what)
        if missed:
            sys.exit("grants the least-privilege check did not find: " + "; ".join(missed))
        return
    bad, roles = findings(cfn_yaml.load(argv[0]), names)
    print(f"  {roles} roles in the transformed template, {len(names)} of them receivers'")
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main(sys.argv[1:])
