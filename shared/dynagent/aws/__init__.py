"""The AWS side: the EC2 adapter and SQS. The only package that imports boto3."""
