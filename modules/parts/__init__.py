"""What the constructs share and no platform team imports: the CDK import, props rules, node pool parts."""
