"""What CloudFormation, RDS and EC2 would refuse or do differently from what the templates mean,
checked offline: each check names the AWS fact it holds (cited in
docs/decisions/0043-a-first-deploy-aws-accepts.md, and for Lambda Managed Instances in
docs/decisions/0047-managed-instances-are-a-second-function-per-receiver.md) and returns its
findings, empty when the templates agree with it.

Run by scripts/check-template with cfn-lint's Python (its YAML loader reads the short forms):

    python scripts/template_checks.py quickstart.yaml template.yaml DEPLOY.md
    python scripts/template_checks.py --fixtures tests/fixtures/templates

The second form runs every check on its fixture under tests/fixtures/templates/ (a template
with the defect the check is for, as the templates had it) and fails unless each finds it, so
no check can pass by finding nothing.
"""

import glob
import json
import os
import re
import sys

from cfnlint.decode import cfn_yaml

# CloudFormation's Rules take Ref and the rule-specific functions alone ("Rules syntax", the
# CloudFormation user guide); cfn-lint accepts others, CloudFormation does not.
RULE_FUNCTIONS = {"Ref", "Fn::And", "Fn::Contains", "Fn::EachMemberEquals", "Fn::EachMemberIn",
                  "Fn::Equals", "Fn::Not", "Fn::Or", "Fn::RefAll", "Fn::ValueOf", "Fn::ValueOfAll"}

# The names built from the stack's name, and each service's limit on them.
NAME_LIMITS = {
    ("AWS::Scheduler::Schedule", "Name"): 64,
    ("AWS::RDS::DBProxy", "DBProxyName"): 63,
    ("AWS::SQS::Queue", "QueueName"): 80,
    ("AWS::Logs::LogGroup", "LogGroupName"): 512,
    ("AWS::Logs::QueryDefinition", "Name"): 255,
    ("AWS::CloudWatch::Dashboard", "DashboardName"): 255,
    ("AWS::Lambda::Function", "FunctionName"): 64,
    ("AWS::IAM::Role", "RoleName"): 64,
}
# A nested stack is named <parent>-<logical id>-<suffix>: the suffix CloudFormation adds is 12
# or 13 characters; the longer is assumed.
NESTED_SUFFIX = 13
# The shortest parent stack name every name must fit.
LEAST_PARENT_NAME = 32


def walk(value):
    """Every dict in value, depth first."""
    if isinstance(value, dict):
        yield value
        for inner in value.values():
            yield from walk(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from walk(inner)


def rules_use_rule_functions(template):
    bad = []
    for name, rule in template.get("Rules", {}).items():
        for node in walk([rule.get("RuleCondition"), [a.get("Assert") for a in rule.get("Assertions", [])]]):
            for key in node:
                if (key.startswith("Fn::") or key == "Condition") and key not in RULE_FUNCTIONS:
                    bad.append(f"Rules.{name}: {key}, which CloudFormation's Rules do not take")
    return bad


def proxy_targets_wait_for_the_writer(template):
    resources = template.get("Resources", {})
    bad = []
    for name, body in resources.items():
        if body.get("Type") != "AWS::RDS::DBProxyTargetGroup":
            continue
        clusters = body.get("Properties", {}).get("DBClusterIdentifiers", [])
        depends = body.get("DependsOn", [])
        depends = [depends] if isinstance(depends, str) else depends
        for instance, inner in resources.items():
            if inner.get("Type") == "AWS::RDS::DBInstance" \
                    and inner.get("Properties", {}).get("DBClusterIdentifier") in clusters \
                    and instance not in depends:
                bad.append(f"{name}: registers the cluster without DependsOn {instance}, its instance")
    return bad


def security_groups_state_their_egress(template):
    return [f"{name}: no SecurityGroupEgress, so EC2's default allows every outbound connection"
            for name, body in template.get("Resources", {}).items()
            if body.get("Type") == "AWS::EC2::SecurityGroup"
            and "SecurityGroupEgress" not in body.get("Properties", {})]


def no_secrets_login_on_an_iam_proxy(template):
    bad = []
    for name, body in template.get("Resources", {}).items():
        props = body.get("Properties", {})
        if body.get("Type") == "AWS::RDS::DBProxy" and props.get("DefaultAuthScheme") == "IAM_AUTH":
            bad += [f"{name}: a SECRETS login beside DefaultAuthScheme IAM_AUTH, which AWS documents nowhere"
                    for auth in props.get("Auth", []) if auth.get("AuthScheme") == "SECRETS"]
    return bad


def deletion_protection_off_at_create(template):
    bad = []
    params = template.get("Parameters", {})
    for name, body in template.get("Resources", {}).items():
        if body.get("Type") not in ("AWS::RDS::DBCluster", "AWS::RDS::DBInstance"):
            continue
        value = body.get("Properties", {}).get("DeletionProtection", False)
        ref = value.get("Ref") if isinstance(value, dict) else None
        default = str(params.get(ref, {}).get("Default", "")).lower() if ref else str(value).lower()
        if default not in ("false", ""):
            bad.append(f"{name}: deletion protection on at create, so a failed first deploy cannot roll back")
    return bad


def a_proxied_cluster_offers_no_pause(template):
    """Aurora Serverless v2 does not pause a cluster an RDS Proxy is associated with."""
    resources = template.get("Resources", {})
    params = template.get("Parameters", {})
    proxied = {c.get("Ref") for body in resources.values()
               if body.get("Type") == "AWS::RDS::DBProxyTargetGroup"
               for c in body.get("Properties", {}).get("DBClusterIdentifiers", []) if isinstance(c, dict)}
    bad = []
    for name in proxied:
        scaling = resources.get(name, {}).get("Properties", {}).get("ServerlessV2ScalingConfiguration", {})
        if "SecondsUntilAutoPause" in scaling:
            bad.append(f"{name}: SecondsUntilAutoPause on a cluster behind a proxy, which never pauses")
        low = scaling.get("MinCapacity")
        spec = params.get(low.get("Ref"), {}) if isinstance(low, dict) else {"Default": low}
        offered = [spec.get("Default")] + list(spec.get("AllowedValues", []))
        if any(v is not None and float(v) < 0.5 for v in offered):
            bad.append(f"{name}: a minimum capacity below 0.5 offered, which pauses nothing behind a proxy")
    return bad


def proxy_role_trusts_as_documented(template):
    """The trust policy of RDS Proxy's role, as the RDS user guide writes it."""
    documented = [{"Effect": "Allow", "Principal": {"Service": "rds.amazonaws.com"}, "Action": "sts:AssumeRole"}]
    resources = template.get("Resources", {})
    bad = []
    for name, body in resources.items():
        if body.get("Type") != "AWS::RDS::DBProxy":
            continue
        role = body.get("Properties", {}).get("RoleArn", {}).get("Fn::GetAtt", [None])[0]
        trust = resources.get(role, {}).get("Properties", {}).get("AssumeRolePolicyDocument", {})
        if json.loads(json.dumps(trust.get("Statement"))) != documented:
            bad.append(f"{role}: trust policy is not the one the RDS user guide documents for RDS Proxy")
    return bad


def dead_letter_queues_take_what_their_sources_hold(template):
    """A queue's messages can move to its dead-letter queue only if the dead-letter queue takes
    their size; both state it, so neither rests on SQS's default."""
    resources = template.get("Resources", {})
    bad = []
    for name, body in resources.items():
        props = body.get("Properties", {})
        if body.get("Type") != "AWS::SQS::Queue" or "RedrivePolicy" not in props:
            continue
        target = props["RedrivePolicy"].get("deadLetterTargetArn", {}).get("Fn::GetAtt", [None])[0]
        source_size = props.get("MaximumMessageSize")
        target_size = resources.get(target, {}).get("Properties", {}).get("MaximumMessageSize")
        if source_size is None or target_size is None:
            bad.append(f"{name} -> {target}: a MaximumMessageSize left to SQS's default")
        elif int(target_size) < int(source_size):
            bad.append(f"{name} -> {target}: the dead-letter queue takes {target_size} bytes, its source {source_size}")
    return bad


def managed_functions_as_lambda_takes_them(template):
    """A function's compute type is fixed when it is created (SAM: CapacityProviderConfig
    "can't be added or removed after the function resource has been created"), so a function on
    Lambda Managed Instances is a resource of its own, never an Fn::If away from a classic one,
    and exists only where its capacity provider does. It takes its network from the capacity
    provider (SAM refuses a VpcConfig beside it, the Globals' included) and has at least 2 GB,
    the smallest function Lambda runs there."""
    resources = template.get("Resources", {})
    conditions = template.get("Conditions", {})
    defaults = template.get("Globals", {}).get("Function", {})
    bad = []

    def implies(condition, wanted):
        if wanted is None or condition == wanted:
            return True
        body = conditions.get(condition, {})
        terms = body.get("Fn::And", []) if isinstance(body, dict) else []
        return any(t == {"Condition": wanted} or implies(t.get("Condition"), wanted)
                   for t in terms if isinstance(t, dict))

    for name, body in resources.items():
        props = body.get("Properties", {})
        config = props.get("CapacityProviderConfig")
        if body.get("Type") != "AWS::Serverless::Function" or config is None:
            continue
        if not isinstance(config, dict) or "Arn" not in config:
            bad.append(f"{name}: CapacityProviderConfig is not a capacity provider's Arn (an Fn::If?), "
                       "but the compute type is fixed when the function is created")
            continue
        arn = json.dumps(config["Arn"])
        named = [p for p, b in resources.items()
                 if b.get("Type") == "AWS::Serverless::CapacityProvider"
                 and any(f in arn for f in (f'"{p}"', f'"{p}.Arn"', "${" + p + "}"))]
        for provider in named:
            if not implies(body.get("Condition"), resources[provider].get("Condition")):
                bad.append(f"{name}: exists where {provider} may not (its Condition does not imply "
                           f"{resources[provider].get('Condition')})")
        if not named:
            bad.append(f"{name}: its capacity provider is not one of the template's")
        if "VpcConfig" in props or "VpcConfig" in defaults:
            bad.append(f"{name}: a VpcConfig ({'its own' if 'VpcConfig' in props else 'the Globals'}) "
                       "beside CapacityProviderConfig")
        memory = props.get("MemorySize", defaults.get("MemorySize", 128))
        if not isinstance(memory, int) or memory < 2048:
            bad.append(f"{name}: MemorySize {memory}, below the 2 GB Lambda Managed Instances start at")
    return bad


def logins_rule_refuses_a_shared_job_login(template):
    """EveryFunctionLogsInAsItsOwnUser, evaluated as CloudFormation would with every provider
    deployed, refuses each two logins that are equal where one is the migrate, sweep or relay
    function's (a receiver's is compared with those three; its message says so)."""
    params = template.get("Parameters", {})
    rule = template.get("Rules", {}).get("EveryFunctionLogsInAsItsOwnUser")
    if rule is None:
        return ["no rule EveryFunctionLogsInAsItsOwnUser"]
    users = sorted(p for p in params if p.endswith("DbUser") and p != "HandlerDbUsers")
    jobs = {"MigrateDbUser", "SweepDbUser", "RelayDbUser"}

    def holds(values):
        ref = lambda name: values.get(name, name)
        return all(evaluate(a["Assert"], ref) for a in rule.get("Assertions", []))

    base = {p: str(spec.get("Default", "")) for p, spec in params.items()}
    base.update({p: "true" for p in params if p.startswith("Deploy")}, DatabaseAuth="iam")
    bad = []
    if not holds(base):
        bad.append("EveryFunctionLogsInAsItsOwnUser refuses the defaults")
    for i, a in enumerate(users):
        for b in users[i + 1:]:
            if (a in jobs or b in jobs) and holds(dict(base, **{a: "shared", b: "shared"})):
                bad.append(f"EveryFunctionLogsInAsItsOwnUser lets {a} and {b} be the same login")
    return bad


def evaluate(node, ref, condition=None):
    """A condition or rule function as CloudFormation evaluates it, `ref(name)` giving a
    parameter's value and `condition(name)` a named condition's; ValueError for a function this
    evaluator does not know."""
    def ev(node):
        if isinstance(node, list):
            return [ev(n) for n in node]
        if not isinstance(node, dict):
            return node
        (key, arg), = node.items()
        if key == "Ref":
            return ref(arg)
        if key == "Condition" and condition is not None:
            return condition(arg)
        if key == "Fn::Equals":
            return str(ev(arg[0])) == str(ev(arg[1]))
        if key == "Fn::Not":
            return not ev(arg[0])
        if key == "Fn::And":
            return all(ev(a) for a in arg)
        if key == "Fn::Or":
            return any(ev(a) for a in arg)
        if key == "Fn::Contains":
            return ev(arg[1]) in ev(arg[0])
        if key == "Fn::Join":
            return arg[0].join(str(x) for x in ev(arg[1]))
        if key == "Fn::Select":
            return ev(arg[1])[int(arg[0])]
        raise ValueError(f"rule or condition function {key}")
    return ev(node)


def condition_holds(template, name, values):
    """A condition of `template` evaluated with the parameters `values` (Ref of another is its
    Default); True for no condition."""
    conditions = template.get("Conditions", {})
    params = template.get("Parameters", {})
    ref = lambda arg: str(values.get(arg, params.get(arg, {}).get("Default", arg)))
    cond = lambda c: evaluate(conditions[c], ref, cond)
    return True if name is None else cond(name)


# What AWS's "Networking for Lambda Managed Instances" lists as the instances' own need: "the
# connectivity is also needed for transmitting telemetry data to CloudWatch Logs and X-Ray"
# (https://docs.aws.amazon.com/lambda/latest/dg/lambda-managed-instances-networking.html);
# the rest are the AWS services the receivers call (SQS, Secrets Manager) and S3, the
# migrations' answer.
MANAGED_INSTANCES_REACH = ("logs", "xray", "sqs", "secretsmanager", "s3")


def managed_instances_reach_what_aws_lists(quickstart, main):
    """A network with no NAT and no internet gateway (the quick start's) must carry, for
    Lambda Managed Instances, a VPC endpoint of every service in MANAGED_INSTANCES_REACH, each
    existing when CreateVpcEndpoints=true and ManagedInstances=true."""
    kinds = {b.get("Type") for b in quickstart.get("Resources", {}).values()}
    if kinds & {"AWS::EC2::NatGateway", "AWS::EC2::InternetGateway"}:
        return []
    values = {"CreateVpcEndpoints": "true", "ManagedInstances": "true", "VpcId": "vpc-1",
              "RouteTableIds": "rtb-1"}
    present = set()
    for name, body in main.get("Resources", {}).items():
        if body.get("Type") != "AWS::EC2::VPCEndpoint":
            continue
        service = json.dumps(body.get("Properties", {}).get("ServiceName"))
        found = re.search(r"\.([a-z0-9-]+)\W*$", service)
        if found and condition_holds(main, body.get("Condition"), values):
            present.add(found.group(1))
    return [f"no {service} VPC endpoint with CreateVpcEndpoints=true and ManagedInstances=true "
            "(AWS's Managed Instances networking page: telemetry to CloudWatch Logs and X-Ray; "
            "and the services the functions call)"
            for service in MANAGED_INSTANCES_REACH if service not in present]


# Lambda's quota: "4 KB, for all environment variables associated with the function, in
# aggregate" (https://docs.aws.amazon.com/lambda/latest/dg/gettingstarted-limits.html).
ENVIRONMENT_LIMIT = 4096
# The longest a value can be where a parameter states no MaxLength: a Secrets Manager ARN of a
# name of at most 512 characters (Secrets Manager quotas,
# https://docs.aws.amazon.com/secretsmanager/latest/userguide/reference_limits.html) with its
# prefix in the longest partition and region and the 7 characters appended; a DNS name's 253.
UNSTATED = {"SecretArn": 600, "DbProxyEndpoint": 253}


def environment_within_lambda_limit(template, function="StripeRecoverFunction"):
    """The function's variables, the Globals' with them, at their longest (each key, its value
    and 6 characters of JSON around them) fit Lambda's 4 KB."""
    params = template.get("Parameters", {})
    bad = []

    def longest(value, key):
        if isinstance(value, (str, int, float, bool)):
            return len(str(value))
        if isinstance(value, dict) and "Ref" in value:
            name = value["Ref"]
            spec = params.get(name)
            if spec is None:
                return 0 if name == "AWS::NoValue" else 64
            if "MaxLength" in spec:
                return int(spec["MaxLength"])
            if "AllowedValues" in spec:
                return max(len(str(v)) for v in spec["AllowedValues"])
            bound = re.search(r"\{0,(\d+)\}\$$", spec.get("AllowedPattern", ""))
            if bound:
                return int(bound.group(1)) + 1
            for suffix, length in UNSTATED.items():
                if name.endswith(suffix):
                    return length
            bad.append(f"{function}: {key} takes {name}, whose length nothing bounds")
            return 0
        if isinstance(value, dict) and "Fn::If" in value:
            return max(longest(v, key) for v in value["Fn::If"][1:])
        if isinstance(value, dict) and "Fn::GetAtt" in value:
            return 20  # a schema version: an integer
        bad.append(f"{function}: {key} is {json.dumps(value)[:60]}, whose length is not known")
        return 0

    variables = dict(template.get("Globals", {}).get("Function", {}).get("Environment", {}).get("Variables", {}))
    body = template.get("Resources", {}).get(function)
    if body is None:
        return [f"no {function}"]
    variables.update(body.get("Properties", {}).get("Environment", {}).get("Variables", {}))
    total = sum(len(k) + longest(v, k) + 6 for k, v in variables.items())
    if total > ENVIRONMENT_LIMIT:
        bad.append(f"{function}: its variables take up to {total} bytes, over Lambda's {ENVIRONMENT_LIMIT}")
    return bad


def max_vcpu_holds_one_receiver(template):
    """ManagedInstancesMaxVCpu's least value holds one receiver's least environments: its
    MinExecutionEnvironments, each of MemorySize / ExecutionEnvironmentMemoryGiBPerVCpu vCPUs.
    (Rules cannot compare numbers, so more receivers are the description's to say.)"""
    least = template.get("Parameters", {}).get("ManagedInstancesMaxVCpu", {}).get("MinValue")
    defaults = template.get("Globals", {}).get("Function", {})
    bad = []
    for name, body in template.get("Resources", {}).items():
        props = body.get("Properties", {})
        config = props.get("CapacityProviderConfig")
        if body.get("Type") != "AWS::Serverless::Function" or not isinstance(config, dict):
            continue
        memory = props.get("MemorySize", defaults.get("MemorySize", 2048))
        per_vcpu = config.get("ExecutionEnvironmentMemoryGiBPerVCpu", 2)
        environments = props.get("FunctionScalingConfig", {}).get("MinExecutionEnvironments", 3)
        need = environments * (memory / 1024) / per_vcpu
        if least is None or float(least) < need:
            bad.append(f"ManagedInstancesMaxVCpu may be {least}, below the {need:g} vCPUs "
                       f"{name}'s {environments} environments need")
    return bad


def name_length(value, stack_length):
    """The longest a name may be, with the stack's name stack_length long; None when it is not
    built from the stack's name."""
    if isinstance(value, dict) and "Fn::Sub" in value:
        text = value["Fn::Sub"] if isinstance(value["Fn::Sub"], str) else value["Fn::Sub"][0]
        if "${AWS::StackName}" in text:
            rest = re.sub(r"\$\{[^}]+\}", "", text.replace("${AWS::StackName}", ""))
            return len(rest) + stack_length
    if value == {"Ref": "AWS::StackName"}:
        return stack_length
    return None


def names(template, stack_length, where):
    """(resource, property, length, limit) of each name built from the stack's name."""
    found = []
    for name, body in template.get("Resources", {}).items():
        props = body.get("Properties", {})
        kinds = [(body.get("Type"), props)]
        if body.get("Type") == "AWS::Serverless::Function":
            kinds += [("AWS::Scheduler::Schedule", e.get("Properties", {}))
                      for e in props.get("Events", {}).values() if e.get("Type") == "ScheduleV2"]
        for kind, where_props in kinds:
            for prop, value in where_props.items():
                length = name_length(value, stack_length)
                if length is None or prop == "Tags":
                    continue
                limit = NAME_LIMITS.get((kind, prop))
                if limit is None and (prop.endswith("Name") or prop == "Name"):
                    found.append((f"{where}{name}", prop, length, None))
                elif limit is not None:
                    found.append((f"{where}{name}", prop, length, limit))
    return found


def longest_parent_name(parent, load):
    """The longest parent stack name with which every name fits, and the names that limit it."""
    nested = [(n, b["Properties"]["Location"]) for n, b in parent.get("Resources", {}).items()
              if b.get("Type") in ("AWS::Serverless::Application", "AWS::CloudFormation::Stack")
              and isinstance(b.get("Properties", {}).get("Location"), str)]
    found = names(parent, 0, "")
    for logical, location in nested:
        extra = 1 + len(logical) + 1 + NESTED_SUFFIX
        found += [(n, p, length + extra, limit) for n, p, length, limit in names(load(location), 0, f"{location}: ")]
    unknown = [f"{n}.{p}: a name built from the stack's name with no limit in NAME_LIMITS"
               for n, p, _, limit in found if limit is None]
    room = min((limit - length for _, _, length, limit in found if limit is not None), default=128)
    return min(room, 128), unknown


def names_fit(parent, load, stated):
    longest, bad = longest_parent_name(parent, load)
    if longest < LEAST_PARENT_NAME:
        bad.append(f"a name built from the stack's name overflows its limit with a stack name of "
                   f"{LEAST_PARENT_NAME} characters (it fits {longest})")
    if stated is not None and stated != longest:
        bad.append(f"DEPLOY.md says a stack name of at most {stated} characters; the names fit {longest}")
    return bad


def deploy_commands_deploy_the_built_template(texts):
    """`sam deploy` after `sam build` deploys .aws-sam/build/template.yaml; given a source
    template it uploads folders that hold no binary. A nested application needs
    CAPABILITY_AUTO_EXPAND."""
    bad = []
    for path, text in texts.items():
        for line in text.splitlines():
            if "sam deploy" not in line:
                continue
            line = line[line.index("sam deploy"):].split("`")[0]
            if re.search(r"(-t|--template-file|--template)[ =]+(quickstart|template)\.yaml", line):
                bad.append(f"{path}: {line.strip()!r} deploys the unbuilt source")
            if path.endswith("quickstart.yaml") and "CAPABILITY_AUTO_EXPAND" not in line:
                bad.append(f"{path}: {line.strip()!r} lacks CAPABILITY_AUTO_EXPAND for the nested template")
    return bad


def check(quickstart, main, load, texts, stated):
    """Every check on the shipped templates: {check name: findings}."""
    both = [quickstart, main]
    return {
        "rules use rule functions alone": sum((rules_use_rule_functions(t) for t in both), []),
        "the proxy's targets wait for the writer": proxy_targets_wait_for_the_writer(quickstart),
        "every security group states its egress": sum((security_groups_state_their_egress(t) for t in both), []),
        "no SECRETS login on an IAM_AUTH proxy": no_secrets_login_on_an_iam_proxy(quickstart),
        "deletion protection off at create": deletion_protection_off_at_create(quickstart),
        "a proxied cluster offers no pause": a_proxied_cluster_offers_no_pause(quickstart),
        "the proxy's role trusts as documented": proxy_role_trusts_as_documented(quickstart),
        "names fit their limits, nested": names_fit(quickstart, load, stated),
        "dead-letter queues take what their sources hold": dead_letter_queues_take_what_their_sources_hold(main),
        "deploy commands deploy the built template": deploy_commands_deploy_the_built_template(texts),
        "functions on Lambda Managed Instances as Lambda takes them": managed_functions_as_lambda_takes_them(main),
        "the logins rule refuses a shared job login": logins_rule_refuses_a_shared_job_login(main),
        "Managed Instances reach what AWS lists": managed_instances_reach_what_aws_lists(quickstart, main),
        "stripe-recover's variables fit Lambda's 4 KB": environment_within_lambda_limit(main),
        "ManagedInstancesMaxVCpu holds a receiver": max_vcpu_holds_one_receiver(main),
    }


def fixtures(folder):
    """Each check on its fixture: {check name: findings}, each of which must be non-empty."""
    load = lambda name: cfn_yaml.load(os.path.join(folder, name))
    return {
        "rules use rule functions alone": rules_use_rule_functions(load("rules.yaml")),
        "the proxy's targets wait for the writer": proxy_targets_wait_for_the_writer(load("database.yaml")),
        "every security group states its egress": security_groups_state_their_egress(load("database.yaml")),
        "no SECRETS login on an IAM_AUTH proxy": no_secrets_login_on_an_iam_proxy(load("database.yaml")),
        "deletion protection off at create": deletion_protection_off_at_create(load("database.yaml")),
        "a proxied cluster offers no pause": a_proxied_cluster_offers_no_pause(load("database.yaml")),
        "the proxy's role trusts as documented": proxy_role_trusts_as_documented(load("database.yaml")),
        "names fit their limits, nested": names_fit(load("names-parent.yaml"), load, None),
        "dead-letter queues take what their sources hold": dead_letter_queues_take_what_their_sources_hold(load("queues.yaml")),
        "deploy commands deploy the built template": deploy_commands_deploy_the_built_template(
            {p: open(p).read() for p in sorted(glob.glob(os.path.join(folder, "*.md")))}),
        "functions on Lambda Managed Instances as Lambda takes them": managed_functions_as_lambda_takes_them(load("managed.yaml")),
        "the logins rule refuses a shared job login": logins_rule_refuses_a_shared_job_login(load("logins.yaml")),
        "Managed Instances reach what AWS lists": managed_instances_reach_what_aws_lists(
            {"Resources": {}}, load("managed-network.yaml")),
        "stripe-recover's variables fit Lambda's 4 KB": environment_within_lambda_limit(load("environment.yaml")),
        "ManagedInstancesMaxVCpu holds a receiver": max_vcpu_holds_one_receiver(load("managed-network.yaml")),
    }


def main(argv):
    if argv[:1] == ["--fixtures"]:
        results = fixtures(argv[1])
        silent = [name for name, found in results.items() if not found]
        for name, found in results.items():
            print(f"  fixture: {name}: {len(found)} finding(s), e.g. {found[0] if found else 'NONE'}")
        if silent:
            sys.exit("checks that found nothing in the fixture made for them: " + "; ".join(silent))
        return
    quickstart_path, main_path, deploy_path = argv
    folder = os.path.dirname(os.path.abspath(quickstart_path))
    deploy = open(deploy_path).read()
    stated = re.search(r"stack\s+name\s+of\s+at\s+most\s+(\d+)\s+characters", deploy)
    texts = {p: open(p).read() for p in [quickstart_path, deploy_path, "README.md",
                                         *sorted(glob.glob("docs/*.md"))] if os.path.exists(p)}
    results = check(cfn_yaml.load(quickstart_path), cfn_yaml.load(main_path),
                    lambda name: cfn_yaml.load(os.path.join(folder, name)), texts,
                    int(stated.group(1)) if stated else -1)
    bad = [f"{name}: {finding}" for name, found in results.items() for finding in found]
    for name, found in results.items():
        print(f"  {name}: {'ok' if not found else f'{len(found)} finding(s)'}")
    if bad:
        sys.exit("\n".join(bad))


if __name__ == "__main__":
    main(sys.argv[1:])
